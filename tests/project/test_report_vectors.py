"""Report cell formats pinned by test vectors (``tests/vectors/report-cells.json``).

The writer (``analysis/_report.py``) and the verifier (``verify/_archive/report.py``) format the
report's cells each with its own code; neither reads the vector file. Every vector is run through
both, so a format changed on one side and not on the other fails here, naming the vector. Issue
31: a McNemar with variants printed ``discordant b={"arm": ...}`` on both sides (the second
condition, not the count), and the verifier passed it because it had the same line copied.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from locations import TESTS_DIR

from analysis import _report as writer
from verify._archive import report as verifier

VECTORS = json.loads((TESTS_DIR / "vectors" / "report-cells.json").read_text(encoding="utf-8"))
SIDES = [pytest.param(writer, id="writer"), pytest.param(verifier, id="verifier")]


def value(x: Any) -> Any:
    """A vector's value, with ``{"$float": "nan"}`` (and ``inf``, ``-inf``) as that float."""
    if isinstance(x, dict) and set(x) == {"$float"}:
        return float(x["$float"])
    if isinstance(x, dict):
        return {k: value(v) for k, v in x.items()}
    if isinstance(x, list):
        return [value(v) for v in x]
    return x


def cases(sections: list[str]) -> list[Any]:
    """Every vector of ``sections`` as a (section, vector) parameter named by its place."""
    return [
        pytest.param(s, v, id=f"{s}-{i}" + (f"-{v['case']}" if "case" in v else ""))
        for s in sections
        for i, v in enumerate(VECTORS[s])
    ]


FORMATTERS: dict[str, Callable[[ModuleType, dict[str, Any]], str]] = {
    "share": lambda m, v: m._pct(value(v["value"]), v["digits"]),
    "pp": lambda m, v: m._pp(value(v["value"]), signed=v["signed"]),
    "p": lambda m, v: m._p(value(v["value"])),
    "number": lambda m, v: m._fmt(value(v["value"])),
    "estimate": lambda m, v: m._estimate_text(value(v["result"])),
    "p_cell": lambda m, v: m._p_text(value(v["result"])),
    "rule": lambda m, v: m._rule_text(value(v["result"])),
}


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize(("section", "vector"), cases(list(FORMATTERS)))
def test_each_side_formats_each_vector(side: ModuleType, section: str, vector: Any) -> None:
    assert FORMATTERS[section](side, vector) == vector["text"]


@pytest.mark.parametrize(("section", "vector"), cases(["decision"]))
def test_the_decision_line_of_each_vector(section: str, vector: Any) -> None:
    """The writer's one line per verdict (``ledger analyze``, the README): numbers beside a
    rule in pp are in pp, float noise is 0 (issue 31)."""
    from analysis._analyze import describe_decision

    assert describe_decision(value(vector["result"])) == vector["text"]


def test_every_test_kind_has_an_estimate_vector() -> None:
    """Each registered statistic's estimate cell is pinned (runner.spec.TESTS)."""
    from runner.spec import TESTS

    pinned = {v["result"].get("test") for v in VECTORS["estimate"]}
    generic = {"lmm", "paired-t", "independent-t", "bootstrap"}  # the difference-and-CI cell
    assert generic <= pinned
    special = {
        "equivalence",
        "mcnemar",
        "gee",
        "factorial",
        "flip-rate",
        "chi-square",
        "qr-bootstrap",
        "sign-test",
    }
    assert special <= pinned
    # the others (position-bias, voting, self-consistency) take the difference-and-CI cell
    assert set(TESTS) - pinned <= {"position-bias", "voting", "self-consistency"}


def test_the_mcnemar_cell_with_variants_reads_as_counts() -> None:
    vector = next(v for v in VECTORS["estimate"] if v["case"] == "mcnemar with variants")
    assert isinstance(vector["result"]["values"]["b"], dict)  # the condition, not a count
    assert vector["text"] == "discordant b=5, c=2"


def test_the_vector_file_is_well_formed() -> None:
    assert VECTORS["version"] == 1
    assert set(VECTORS) == {"version", "about", "decision", *FORMATTERS}
    for section in FORMATTERS:
        assert VECTORS[section], section
        for vector in VECTORS[section]:
            assert isinstance(vector["text"], str)
