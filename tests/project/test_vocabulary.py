"""One vocabulary, two implementations (DESIGN.md §16): ``tests/vectors/vocabulary.json``.

The writer (``ledger/``, ``runner/``, ``analysis/``) and the verifier (``verify/``) each keep
their own constants for the event kinds, the roles and what each may append, the registered
statistics, the response parsers and step kinds (their registries' keys), the post-hoc tests,
the verdict words, the share outcomes, the tolerances, the bootstrap bounds and the report's
fixed captions and labels. Each side is compared here with the
one data file, never with the other side's code, so a change that one side makes and the other
does not follow fails a test naming the member. ``verify/`` still imports nothing from the
others (``tests/verify/test_verify_imports.py``); number formats are pinned by ``report-cells.json``
(``tests/project/test_report_vectors.py``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from locations import REPO

ROOT = REPO
VOCABULARY: dict[str, Any] = json.loads(
    (ROOT / "tests" / "vectors" / "vocabulary.json").read_text(encoding="utf-8")
)
_VERDICT = re.compile(r'"(supported)" if [^\n]+? else "([a-z ]+)"')
_KIND = re.compile(
    r"""(?:of_kind|events|EventSpec|kind ==|kind !=)\(?\s*["']([a-z]+\.[a-z_]+)["']"""
)


def writer_side() -> dict[str, Any]:
    """The writer's constants, in the vocabulary's shape."""
    from analysis import _report as report
    from analysis._analyze import NOT_APPLICABLE
    from analysis._posthoc import POSTHOC_TESTS
    from ledger import _roles
    from runner._qrboot import QR_OUTCOMES
    from runner._timestamping import TIMESTAMP_KIND
    from runner.spec import PARSERS, TESTS
    from runner.steps._core import STEP_PARSERS

    return {
        "event_kinds": sorted(_roles.KNOWN_KINDS),
        "extension_kinds": [TIMESTAMP_KIND],
        "roles": list(_roles.ROLES),
        "role_kinds": {k: sorted(v) for k, v in _roles.ROLE_KINDS.items()},
        "tests": list(TESTS),
        "parsers": list(PARSERS),
        "step_kinds": list(STEP_PARSERS),
        "posthoc_tests": list(POSTHOC_TESTS),
        "share_outcomes": sorted(k for k, v in QR_OUTCOMES.items() if v.share),
        "status_words": {"not_applicable": NOT_APPLICABLE},
        "report": _report_constants(report),
    }


def verifier_side() -> dict[str, Any]:
    """The verifier's constants, in the vocabulary's shape."""
    from verify import _keys, _parsers, _qrboot, _science, _step_kinds
    from verify._archive import report
    from verify._archive.timestamps import TIMESTAMP_KIND
    from verify._recompute import posthoc, results

    return {
        "extension_kinds": [TIMESTAMP_KIND],
        "parsers": list(_parsers.REGISTRY),
        "step_kinds": list(_step_kinds.REGISTRY),
        "roles": sorted(_keys.ROLES),
        "role_kinds": {k: sorted(v) for k, v in _keys._ROLE_KINDS.items()},
        "posthoc_tests": list(posthoc.POSTHOC_TESTS),
        "share_outcomes": sorted(_qrboot.SHARES),
        "tolerances": {
            "rel": _science.REL_TOL,
            "abs": _science.ABS_TOL,
            "lmm_rel": _science.LMM_REL_TOL,
            "gee_rel": results.GEE_REL_TOL,
        },
        "bootstrap_iterations": {"max": _science.MAX_BOOTSTRAP_ITERATIONS},
        "status_words": {"not_applicable": results.NOT_APPLICABLE},
        "report": _report_constants(report),
    }


def _report_constants(module: Any) -> dict[str, Any]:
    return {
        "captions": {
            "exploratory": module.EXPLORATORY,
            "sensitivity": module.SENSITIVITY,
            "posthoc": module.POSTHOC,
            "by_stimulus_intro": module.BY_STIMULUS_INTRO,
            "component_rule": module.COMPONENT_RULE,
            "distribution_intro": module.DISTRIBUTION_INTRO,
        },
        "other_label": module.OTHER_LABEL,
        "model_fields": list(module.MODEL_FIELDS),
        "sensitivity_models": dict(module.SENSITIVITY_MODELS),
    }


def expected(member: str, got: Any) -> Any:
    """The vocabulary's ``member`` in the shape the side gives (roles are a set on one side)."""
    want = VOCABULARY[member]
    if member == "roles" and got == sorted(got):
        return sorted(want)
    if member == "bootstrap_iterations":
        return {k: want[k] for k in got}
    return want


@pytest.mark.parametrize("member", sorted(writer_side()))
def test_the_writer_speaks_the_vocabulary(member: str) -> None:
    got = writer_side()[member]
    assert got == expected(member, got), f"writer {member} differs from vocabulary.json"


@pytest.mark.parametrize("member", sorted(verifier_side()))
def test_the_verifier_speaks_the_vocabulary(member: str) -> None:
    got = verifier_side()[member]
    assert got == expected(member, got), f"verifier {member} differs from vocabulary.json"


def test_every_member_is_compared_on_some_side() -> None:
    compared = set(writer_side()) | set(verifier_side()) | {"version", "about"}
    assert compared | {"verdicts"} == set(VOCABULARY)


@pytest.mark.parametrize("package", ["ledger", "runner", "analysis", "verify"])
def test_every_event_kind_a_package_names_is_in_the_vocabulary(package: str) -> None:
    """A kind either side reads or appends (``of_kind("x.y")``, ``EventSpec("x.y"``,
    ``kind == "x.y"``) must be a known or extension kind of the vocabulary."""
    known = set(VOCABULARY["event_kinds"]) | set(VOCABULARY["extension_kinds"])
    unknown: dict[str, str] = {}
    seen: set[str] = set()
    for path in sorted((ROOT / package).rglob("*.py")):
        for kind in _KIND.findall(path.read_text(encoding="utf-8")):
            seen.add(kind)
            if kind not in known:
                unknown.setdefault(kind, path.relative_to(ROOT).as_posix())
    assert seen, f"the scan found no event kind in {package}/"
    assert not unknown, f"event kinds missing from vocabulary.json: {unknown}"


@pytest.mark.parametrize("package", ["analysis", "verify"])
def test_the_verdict_words_are_the_vocabulary_s(package: str) -> None:
    """Every verdict either side assigns is one of the vocabulary's."""
    said: set[str] = set()
    for path in sorted((ROOT / package).rglob("*.py")):
        for pair in _VERDICT.findall(path.read_text(encoding="utf-8")):
            said |= set(pair)
    assert said and said <= set(VOCABULARY["verdicts"]), said


def test_the_spec_refuses_bootstrap_iterations_outside_the_vocabulary_s_bounds(
    tmp_path: Path,
) -> None:
    """The writer checks its bounds at load (runner/spec/_design.py), the verifier its maximum."""
    from runner.spec import SpecError, load_study
    from tests.analysis.test_factorial import SPEC, write_study

    bounds = VOCABULARY["bootstrap_iterations"]
    current = re.search(r"bootstrap_iterations = (\d+)", SPEC)
    assert current is not None
    for number, ok in (
        (bounds["min"], True),
        (bounds["max"], True),
        (bounds["min"] - 1, False),
        (bounds["max"] + 1, False),
    ):
        spec = SPEC.replace(current.group(0), f"bootstrap_iterations = {number}")
        root = write_study(tmp_path / str(number), spec)
        if ok:
            load_study(root)
        else:
            with pytest.raises(SpecError, match="bootstrap_iterations"):
                load_study(root)
