"""The simulated vision model: perception from pixels, determinism and the paper's phenotypes."""

from __future__ import annotations

import ast
import base64
import builtins
import hashlib
import json
import time
import tomllib
from collections import Counter
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

import runner.simulated._vision as simulated
from ledger import canonical_json
from runner import _stimuli as stimuli
from runner.simulated._vision import (
    PARAMS_VERSION,
    SimParams,
    SimulatedModel,
    detect_components,
    perceive,
)

SEED = 20260421
ARMS = "ABCDE"
REPLICATES = 30


@cache
def template() -> tuple[dict[str, str], dict[str, list[str]]]:
    """Component texts and arm component lists of the prompt-tumbling-e template."""
    root = Path(str(resources.files("runner") / "templates" / "prompt_tumbling_e"))
    spec = tomllib.loads((root / "study.toml").read_text(encoding="utf-8"))
    texts = {
        name: (root / rel).read_text(encoding="utf-8") for name, rel in spec["components"].items()
    }
    arms = {arm: list(table["components"]) for arm, table in spec["arms"].items()}
    return texts, arms


def arm_text(arm: str) -> str:
    """Composed as Study.arm_text: components stripped of newlines, blank-line joined, final \\n."""
    texts, arms = template()
    return "\n\n".join(texts[c].strip("\n") for c in arms[arm]) + "\n"


@cache
def probes() -> tuple[stimuli.Chart, ...]:
    return tuple(stimuli.probe_set(SEED))


def tumbling_probes() -> list[stimuli.Chart]:
    return [c for c in probes() if c.kind == stimuli.KIND_TUMBLING_E]


def snellen_probe() -> stimuli.Chart:
    return next(c for c in probes() if c.kind == stimuli.KIND_SNELLEN)


def request(png: bytes, text: str) -> dict[str, Any]:
    return {
        "max_tokens": 2048,
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/png",
                            "data": base64.b64encode(png).decode("ascii"),
                        },
                    },
                    {"type": "text", "text": text},
                ],
            }
        ],
        "model": "claude-sonnet-4-6",
        "temperature": 1.0,
    }


def text_of(response: dict[str, Any]) -> str:
    return "".join(b["text"] for b in response["content"] if b["type"] == "text")


def parse(text: str) -> dict[str, Any] | None:
    """A tolerant reader: strips a ```json fence and leading prose; None if no JSON object."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.split("```", 1)[0]
    start = body.find("{")
    if start < 0:
        return None
    try:
        obj, _ = json.JSONDecoder().raw_decode(body[start:])
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def orientations(answer: dict[str, Any]) -> list[str]:
    return [o for row in answer["rows"] for o in row["orientations"]]


def truth(chart: stimuli.Chart) -> list[str]:
    return [g.orientation for g in chart.glyphs]


# --------------------------------------------------------------------------- basics


def test_components_are_recognised_from_the_arm_texts() -> None:
    _, arms = template()
    for arm, components in arms.items():
        assert detect_components(arm_text(arm)) == frozenset(components), arm
    assert detect_components("What do you see?") == frozenset({"vehicle"})


def test_response_shape_and_id() -> None:
    chart = tumbling_probes()[4]
    req = request(chart.png, arm_text("A"))
    seed = f"{SEED}|A|{chart.id}|1|1"
    response = SimulatedModel().respond(req, seed)
    digest = hashlib.sha256(seed.encode() + canonical_json(req)).hexdigest()
    assert response["id"] == f"msg_sim_{digest[:24]}"
    assert response["type"] == "message"
    assert response["role"] == "assistant"
    assert response["model"] == "simulated/claude-sonnet-4-6"
    assert response["stop_reason"] == "end_turn"
    assert response["stop_sequence"] is None
    assert [b["type"] for b in response["content"]] == ["text"]
    usage = response["usage"]
    assert usage["input_tokens"] == len(arm_text("A")) // 4 + 1600
    assert usage["output_tokens"] == len(text_of(response)) // 4
    json.dumps(response)  # plain JSON types only
    assert PARAMS_VERSION and PARAMS_VERSION in SimParams().as_dict()["version"]


def test_deterministic_in_request_and_seed() -> None:
    chart = tumbling_probes()[4]
    req = request(chart.png, arm_text("B"))
    first = json.dumps(SimulatedModel().respond(req, "s|B|mixed-1|1|1"), sort_keys=True)
    again = json.dumps(SimulatedModel().respond(req, "s|B|mixed-1|1|1"), sort_keys=True)
    assert first == again
    texts = {text_of(SimulatedModel().respond(req, f"s|B|mixed-1|{i}|1")) for i in range(20)}
    assert len(texts) > 1


# --------------------------------------------------------------------------- perception


@pytest.mark.parametrize("arm", ARMS)
def test_noiseless_perception_reads_every_glyph(arm: str) -> None:
    model = SimulatedModel(SimParams(noise=False))
    for chart in tumbling_probes():
        answer = parse(text_of(model.respond(request(chart.png, arm_text(arm)), f"{arm}|x")))
        assert answer is not None
        assert answer["chart_type"] == "tumbling-e"
        assert [len(r["orientations"]) for r in answer["rows"]] == list(stimuli.SNELLEN_ROWS)
        assert [r["row"] for r in answer["rows"]] == list(range(1, 12))
        assert orientations(answer) == truth(chart), chart.id


@pytest.mark.parametrize("params", [SimParams(), SimParams(noise=False)])
def test_snellen_control_is_rejected_in_every_arm(params: SimParams) -> None:
    model = SimulatedModel(params)
    chart = snellen_probe()
    assert not perceive(chart.png).tumbling_e
    for arm in ARMS:
        for rep in range(10):
            answer = parse(
                text_of(model.respond(request(chart.png, arm_text(arm)), f"{arm}|{rep}"))
            )
            assert answer == {"chart_type": "other", "rows": []}


def test_other_canvas_sizes_read_correctly() -> None:
    model = SimulatedModel(SimParams(noise=False))
    charts = [
        stimuli.uniform_chart("LEFT", width=700, height=1000),
        stimuli.mixed_chart("other-canvas", 7, width=1200, height=900),
        stimuli.mixed_chart("small-canvas", 8, width=500, height=700),
    ]
    for chart in charts:
        answer = parse(text_of(model.respond(request(chart.png, arm_text("A")), "seed")))
        assert answer is not None
        assert orientations(answer) == truth(chart), chart.id


def test_small_glyphs_are_harder() -> None:
    """On a smaller canvas row 11 (12 px) is misread far more often than row 10 (15 px)."""
    chart = stimuli.mixed_chart("small-rows", 9, width=700, height=1000)
    model = SimulatedModel()
    errors: Counter[int] = Counter()
    for rep in range(40):
        answer = parse(text_of(model.respond(request(chart.png, arm_text("A")), f"r{rep}")))
        assert answer is not None
        for glyph, said in zip(chart.glyphs, orientations(answer), strict=True):
            errors[glyph.row] += glyph.orientation != said
    assert errors[11] > 3 * max(1, errors[10])
    assert sum(errors[r] for r in range(1, 9)) == 0


def test_never_reads_the_truth(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the simulated model read a truth table")

    real_open = builtins.open

    def guarded_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file).lower().endswith(".csv"):
            raise AssertionError(f"the simulated model opened {file}")
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(stimuli, "read_truth_csv", refuse)
    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(Path, "read_text", refuse)
    chart = stimuli.mixed_chart("unseen-chart", 12345)  # not in the perception cache yet
    answer = parse(
        text_of(SimulatedModel(SimParams(noise=False)).respond(request(chart.png, "E?"), "s"))
    )
    assert answer is not None
    assert orientations(answer) == truth(chart)
    source = Path(simulated.__file__).read_bytes().decode("utf-8")
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not any(name and "stimuli" in name for name in imported)


def test_unrecognised_prompt_and_missing_image() -> None:
    chart = tumbling_probes()[0]
    model = SimulatedModel()
    parsed = 0
    for rep in range(20):
        answer = parse(text_of(model.respond(request(chart.png, "Read this chart.\n"), f"c{rep}")))
        if answer is not None and answer["rows"]:
            parsed += 1
            assert answer["chart_type"] == "tumbling-e"
            assert len(orientations(answer)) == 61
    assert parsed >= 15
    req = request(b"not an image", arm_text("A"))
    assert parse(text_of(model.respond(req, "x"))) == {"chart_type": "other", "rows": []}


# --------------------------------------------------------------------------- phenotypes


@cache
def study_run() -> dict[str, dict[str, Any]]:
    """REPLICATES x 6 tumbling-E probes per arm: accuracy, row 11, errors, formats."""
    model = SimulatedModel()
    results: dict[str, dict[str, Any]] = {}
    for arm in ARMS:
        text = arm_text(arm)
        stats: dict[str, Any] = {
            "correct": 0,
            "scored": 0,
            "row11_correct": 0,
            "row11_scored": 0,
            "wrong": Counter(),
            "wrong_rows": Counter(),
            "down_wrong": Counter(),
            "probe": {},
            "unparseable": 0,
            "not_bare": 0,
        }
        for chart in tumbling_probes():
            req = request(chart.png, text)
            good = scored = 0
            for rep in range(1, REPLICATES + 1):
                out = text_of(model.respond(req, f"{SEED}|{arm}|{chart.id}|{rep}|1"))
                stats["not_bare"] += not out.startswith("{")
                answer = parse(out)
                if answer is None or len(orientations(answer)) != len(chart.glyphs):
                    stats["unparseable"] += 1
                    continue
                for glyph, said in zip(chart.glyphs, orientations(answer), strict=True):
                    ok = glyph.orientation == said
                    good += ok
                    scored += 1
                    if glyph.row == 11:
                        stats["row11_correct"] += ok
                        stats["row11_scored"] += 1
                    if not ok:
                        stats["wrong"][said] += 1
                        stats["wrong_rows"][glyph.row] += 1
                        if glyph.orientation == "DOWN":
                            stats["down_wrong"][said] += 1
            stats["probe"][chart.id] = good / max(1, scored)
            stats["correct"] += good
            stats["scored"] += scored
        stats["accuracy"] = stats["correct"] / stats["scored"]
        stats["row11"] = stats["row11_correct"] / stats["row11_scored"]
        results[arm] = stats
    return results


def test_rule_arms_near_ceiling_with_errors_on_row_11() -> None:
    run = study_run()
    for arm in "AE":
        assert run[arm]["accuracy"] >= 0.95, arm
        assert run[arm]["unparseable"] == 0
        assert run[arm]["not_bare"] == 0
        wrong_rows: Counter[int] = run[arm]["wrong_rows"]
        assert wrong_rows[11] >= 0.8 * sum(wrong_rows.values()), arm
        assert run[arm]["row11"] < run[arm]["accuracy"]
    assert max(abs(run["A"]["probe"][p] - run["E"]["probe"][p]) for p in run["A"]["probe"]) < 0.05


def test_no_rule_phenotypes() -> None:
    run = study_run()
    assert run["B"]["accuracy"] < run["C"]["accuracy"]
    assert 0.35 < run["B"]["accuracy"] < 0.65
    assert 0.6 < run["C"]["accuracy"] < 0.9
    for arm in "BCD":
        assert run[arm]["accuracy"] < run["A"]["accuracy"] - 0.15, arm
        wrong: Counter[str] = run[arm]["wrong"]
        assert wrong.most_common(1)[0][0] == "RIGHT", arm
        down_wrong: Counter[str] = run[arm]["down_wrong"]
        assert down_wrong["UP"] > 0, arm  # DOWN -> UP mirror confusion
    wrong_b: Counter[str] = run["B"]["wrong"]
    assert wrong_b["RIGHT"] / sum(wrong_b.values()) > 0.5
    # Bimodal across probes: some near ceiling, others collapsed toward RIGHT.
    per_probe = sorted(run["B"]["probe"].values())
    assert per_probe[-1] > 0.9 and per_probe[0] < 0.3
    # Some outputs leave the bare-JSON form; some of them cannot be parsed at all.
    assert sum(run[arm]["not_bare"] for arm in "BCD") > 0
    assert sum(run[arm]["unparseable"] for arm in "BCD") > 0


def test_speed_with_cached_perception() -> None:
    chart = tumbling_probes()[5]
    req = request(chart.png, arm_text("B"))
    model = SimulatedModel()
    model.respond(req, "warm-up")
    start = time.perf_counter()
    for rep in range(100):
        model.respond(req, f"t{rep}")
    assert (time.perf_counter() - start) / 100 < 0.02
