"""Write the ``green-shielding`` template's case files from ``scripts/green_cases.py``.

The 30 cases are written for this project (no dataset's text). Each raw patient query is put
together from its parts (clinical sentences, and where the case has them a tone sentence, an
irrelevant detail, a self-diagnosis guess, extra asks), in the HealthCareMagic-100k release's
format (a JSON array of ``instruction`` / ``input`` / ``output``: the physician's reply is
``output``), plus a metadata sidecar keyed by the item id ``ledger items import --format
healthcaremagic --id-prefix gs`` gives each record (``gs-1`` ...): the three reference sets and
the seven factor labels of seed 001 (F1-F7). Run it from the repository root::

    python scripts/make_green_cases.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from green_cases import CASES

OUT = Path(__file__).resolve().parent.parent / "runner" / "templates" / "green_shielding" / "data"
INSTRUCTION = (
    "If you are a doctor, please answer the medical questions based on the patient's description."
)


def query(case: dict[str, Any], n: int) -> str:
    """The raw patient query of ``case`` (its ``n``, from 0, varies where the tone goes)."""
    extra = [case.get(k) for k in ("i", "g", "a")]
    if case["u"]:
        parts = [case.get("t"), case["c"], *extra] if n % 2 else [case["c"], case.get("t"), *extra]
        return ", ".join(p.lower() for p in parts if p)
    order = [
        [case.get("t"), case["c"]],
        [case["c"], case.get("t")],
        [case.get("i"), case["c"], case.get("t")],
    ][n % 3]
    rest = [p for p in extra if p not in order]
    return " ".join(p for p in [*order, *rest] if p)


def main() -> None:
    """Write ``cases-hcm.json`` and ``cases-metadata.json``."""
    records: list[dict[str, str]] = []
    metadata: dict[str, dict[str, Any]] = {}
    cases: list[dict[str, Any]] = CASES
    for n, case in enumerate(cases):
        records.append({"instruction": INSTRUCTION, "input": query(case, n), "output": case["doc"]})
        assert set(case["H"]) <= set(case["P"]) and set(case["S"]) <= set(case["P"]), n
        metadata[f"gs-{n + 1}"] = {
            "reference_plausible": case["P"],
            "reference_highly_likely": case["H"],
            "reference_safety_critical": case["S"],
            "f1_specific_guess": "yes" if case.get("g") else "no",
            "f2_irrelevant_details": "yes" if case.get("i") else "no",
            "f3_lacks_objective_data": "yes" if case["f3"] else "no",
            "f4_lacks_symptom_history": "yes" if case["f4"] else "no",
            "f5_unstructured": "yes" if case["u"] or case.get("a") else "no",
            "f6_emotional_tone": "yes" if case.get("t") else "no",
            "f7_first_person": "yes" if case.get("fp", True) else "no",
        }
    (OUT / "cases-hcm.json").write_text(
        json.dumps(records, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (OUT / "cases-metadata.json").write_text(
        json.dumps({"version": 1, "items": metadata}, indent=1, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )


if __name__ == "__main__":
    main()
