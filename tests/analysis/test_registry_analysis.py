"""The writer's analysis-side statistic registry (``analysis/statistics/``, issue 33).

Its kinds are the vocabulary's (``tests/vectors/vocabulary.json`` "tests"), in that order; each
module is named after its kind; every recorded hypothesis result holds its kind's schema; the
registry answers what ``analysis/`` once asked by naming tests.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from locations import REPO

from analysis import _stats as stats
from analysis import statistics
from analysis._analyze import describe_decision

ROOT = REPO
VOCABULARY = json.loads((ROOT / "tests" / "vectors" / "vocabulary.json").read_text("utf-8"))
GOLDEN = ROOT / "archive" / "prompt-tumbling-e" / "analysis" / "results.json"


def schema_gaps(results: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(result id, missing keys) of each computed hypothesis result lacking its kind's schema."""
    gaps = []
    for r in results:
        kind = statistics.kind_of(r)
        if not r.get("hypothesis") or r.get("status") != "ok" or kind is None:
            continue
        missing = [k for k in kind.schema if k not in (r.get("values") or {})]
        if missing:
            gaps.append((str(r.get("id")), missing))
    return gaps


def test_the_registry_keys_are_the_vocabulary_tests_in_order() -> None:
    assert list(statistics.REGISTRY) == VOCABULARY["tests"]
    assert list(statistics.TESTS) == VOCABULARY["tests"]
    assert [s.order for s in statistics.REGISTRY.values()] == sorted(
        s.order for s in statistics.REGISTRY.values()
    )


def test_the_posthoc_kinds_are_the_vocabulary_posthoc_tests() -> None:
    assert list(statistics.POSTHOC_TESTS) == VOCABULARY["posthoc_tests"]
    assert statistics.MIXED_MODEL.posthoc is not None


def test_each_module_is_named_after_its_kind() -> None:
    package = ROOT / "analysis" / "statistics"
    modules = sorted(p.stem for p in package.glob("*.py") if not p.stem.startswith("_"))
    assert modules == sorted(k.replace("-", "_") for k in statistics.REGISTRY)
    for key, kind in statistics.REGISTRY.items():
        assert kind.key == key and kind.schema, key


def test_every_golden_result_holds_its_kinds_schema() -> None:
    results = json.loads(GOLDEN.read_text("utf-8"))
    kinds = {r["test"] for r in results if r.get("hypothesis") and r.get("status") == "ok"}
    assert len(kinds) >= 3  # the archive's lmm, paired-t, independent-t and equivalence
    assert schema_gaps(results) == []


def test_a_schema_gap_is_found_and_named() -> None:
    result = {"id": "hypothesis.H1", "hypothesis": "H1", "test": "lmm", "status": "ok"}
    result["values"] = {"estimate": 0.1, "p_raw": 0.01}
    assert schema_gaps([result]) == [("hypothesis.H1", ["lower", "upper", "singular_fit"])]


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(stats.StatsError, match="unknown test 'nope'"):
        statistics.statistic("nope")
    assert statistics.kind_of({"test": "nope"}) is None
    assert not statistics.is_seed002({"test": "nope"})


def test_seed_002_membership_follows_the_hypothesis() -> None:
    assert statistics.is_seed002({"test": "flip-rate", "arm": "A"})
    assert statistics.is_seed002({"test": "mcnemar", "contrast": ["A", "B"], "variant": "v"})
    assert not statistics.is_seed002({"test": "mcnemar", "contrast": ["A", "B"]})
    plan = {"hypotheses": [{"test": "lmm"}, {"test": "gee", "contrast": ["A", "B"]}]}
    assert statistics.registers_seed002(plan)
    assert not statistics.registers_seed002({"hypotheses": [{"test": "lmm"}]})


@pytest.mark.parametrize("key", list(statistics.REGISTRY))
def test_the_decision_line_writes_pp_exactly_for_differences_of_shares(key: str) -> None:
    result = {
        "test": key,
        "status": "ok",
        "decided_by": {"rule": "p < 0.05", "estimate": 0.25},
        "values": {},
    }
    line = describe_decision(result)
    assert ("+25.0 pp" in line) is statistics.REGISTRY[key].in_pp, line


def test_the_p_rule_checks_the_direction_only_when_the_kind_says_so() -> None:
    h = {"test": "x", "sides": "one-sided"}
    v = {"alpha": 0.05, "p_raw": 0.01, "estimate": -0.2}
    assert statistics.statistic("paired-t").decide(h, v)[0] == "not supported"
    assert statistics.statistic("chi-square").decide(h, v)[0] == "supported"
    assert statistics.statistic("factorial").decide(h, v)[0] == "supported"
