"""Recorded model steps (issue 17, ``docs/prompts.md`` §8, ``docs/trials.md`` §5).

A study with a screening and a rewriting item step, two target arms and two judges with
majority aggregation (``tests/support/steps_study.py``) locks, shows its step graph, runs on the
simulated backend with every step call recorded before it is sent, and resumes without calling
anything twice. Each refusal of the study language is a named test that appends nothing.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from helpers import fixed_key
from locations import TESTS_DIR
from steps_study import STEPS, write_study

from ledger import Ledger
from ledger.cli import main
from runner._backends import SimulatedBackend
from runner._execute import RunOptions, run_study
from runner._lock import lock_study
from runner._state import load_state
from runner.spec import SpecError, load_study
from runner.steps._core import aggregate, parse_output

KEY = fixed_key("steps.example/owner")


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(path))
        yield path


@pytest.fixture(scope="module")
def ran(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The study, locked and run to completion on the simulated backend (shared)."""
    root = write_study(tmp_path_factory.mktemp("ran") / "study")
    lock_study(root, KEY)
    result = run_study(root, KEY, SimulatedBackend(), RunOptions(concurrency=4, jitter_seed=1))
    assert result.reason == "complete"
    return root


def events(root: Path) -> list[object]:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return list(log.events())


def lock_refused(root: Path) -> str:
    """Lock ``root`` through the CLI; assert it is refused with nothing written; the message."""
    result = invoke("lock", root, "--key", _key_file(root))
    assert result.exit_code != 0, result.output
    assert not (root / "ledger.db").exists()
    return result.output


def _key_file(root: Path) -> Path:
    path = root.parent / "owner.key"
    if not path.exists():
        KEY.save(path)
    return path


# ------------------------------------------------------------------ lock and graph


def test_steps_are_locked_and_hashed(ran: Path) -> None:
    with Ledger.open(ran / "ledger.db", readonly=True) as log:
        protocol = next(iter(log.events("protocol.locked")))
    steps = protocol.body["steps"]
    assert set(steps) == {"screen", "rewrite", "judge"}
    assert steps["judge"]["aggregate"] == "majority"
    assert steps["judge"]["models"] == ["judge_a", "judge_b"]
    assert steps["judge"]["sees"] == "blind"
    assert steps["rewrite"]["on_unparseable"] == {"retry": 2, "then": "exclude"}
    manifest = protocol.body["manifest"]
    for rel in ("prompts/judge.txt", "prompts/rewrite.txt", "prompts/screen.txt"):
        assert manifest[rel] == __import__("hashlib").sha256((ran / rel).read_bytes()).hexdigest()


def test_arms_and_schedule_show_the_step_graph(ran: Path) -> None:
    result = invoke("arms", ran, "--json")
    assert result.exit_code == 0, result.output
    graph = json.loads(result.output)["steps"]
    assert graph["trial_reads"] == ["rewrite"]
    assert graph["order"][-2] == ["(trials)"] and graph["order"][-1] == ["judge"]
    assert graph["steps"]["judge"]["calls"] == 2 * 24
    text = invoke("schedule", ran, "--limit", "1")
    assert "step judge: on trial, models judge_a, judge_b" in text.output


def test_unknown_step_key_is_refused_naming_the_line(tmp_path: Path) -> None:
    root = write_study(
        tmp_path / "s",
        STEPS.replace('sees = "blind"', "").replace(
            'aggregate = "majority"', 'aggregate = "majority"\nvoting = "x"'
        ),
    )
    with pytest.raises(SpecError) as err:
        load_study(root)
    assert "[steps.judge] voting: unknown key" in str(err.value)
    assert "study.toml:" in str(err.value)


def test_input_no_step_produces_is_refused(tmp_path: Path, home: Path) -> None:
    root = write_study(
        tmp_path / "s", judge="Reference: {reference}\n{steps.summary}\nCandidate: {response}\n"
    )
    out = lock_refused(root)
    assert "slot {steps.summary}: no step named 'summary' produces it" in out
    assert "prompts/judge.txt:2:1" in out


def test_cycle_is_refused(tmp_path: Path, home: Path) -> None:
    root = write_study(
        tmp_path / "s",
        screen="Include or exclude?\n{steps.rewrite}\n",
        rewrite="Text: {steps.screen}\n",
    )
    out = lock_refused(root)
    assert "cycle: rewrite -> screen -> rewrite" in out


def test_trial_step_read_by_item_step_is_refused(tmp_path: Path, home: Path) -> None:
    root = write_study(tmp_path / "s", rewrite="Text: {context} {steps.judge}\n")
    out = lock_refused(root)
    assert "slot {steps.judge}: 'judge' is a trial step" in out


@pytest.mark.parametrize("slot", ["arm", "factor.tone", "target_model", "trial", "request"])
def test_blind_judge_with_a_leaking_slot_is_refused(tmp_path: Path, home: Path, slot: str) -> None:
    root = write_study(
        tmp_path / "s", judge=f"Reference: {{reference}}\nCandidate: {{response}}\n({{{slot}}})\n"
    )
    out = lock_refused(root)
    assert f"slot {{{slot}}}: a blind step may not see the arm" in out
    assert "prompts/judge.txt:3:2" in out


def test_item_step_may_not_read_the_key_or_a_response(tmp_path: Path, home: Path) -> None:
    root = write_study(tmp_path / "s", rewrite="Text: {context} {reference}\n")
    out = lock_refused(root)
    assert "slot {reference}: an item step runs before any trial" in out


def test_grounding_step_may_see_the_request(tmp_path: Path, home: Path) -> None:
    steps = (
        STEPS
        + """
[steps.grounded]
on = "trial"
models = ["judge_a"]
template = "prompts/grounded.txt"
parser = "label"
labels = ["grounded", "ungrounded"]
sees = "request"
"""
    )
    root = write_study(tmp_path / "s", steps, grounded="Prompt: {request}\nAnswer: {response}\n")
    lock_study(root, KEY)
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        protocol = next(iter(log.events("protocol.locked")))
    assert protocol.body["steps"]["grounded"]["sees"] == "request"


def test_json_step_needs_a_schema_and_fields_must_exist(tmp_path: Path, home: Path) -> None:
    steps = (
        STEPS
        + """
[steps.split]
on = "item"
models = ["judge_a"]
template = "prompts/split.txt"
parser = "json"
"""
    )
    root = write_study(tmp_path / "s", steps, split="Text: {context}\n")
    with pytest.raises(SpecError, match="the json parser needs a locked JSON Schema file"):
        load_study(root)
    (root / "schemas").mkdir()
    (root / "schemas" / "split.json").write_text(
        json.dumps(
            {
                "type": "object",
                "properties": {"symptoms": {"type": "string"}},
                "required": ["symptoms"],
                "additionalProperties": False,
            }
        )
    )
    spec = (
        (root / "study.toml")
        .read_text()
        .replace('parser = "json"', 'parser = "json"\nschema = "schemas/split.json"')
    )
    (root / "study.toml").write_text(spec)
    (root / "prompts" / "rewrite.txt").write_text("Text: {steps.split.signs}\n")
    out = lock_refused(root)
    assert "the schema of step 'split' has no property 'signs'" in out


# ------------------------------------------------------------------ parsing and votes


def test_parsers_and_aggregation_rules() -> None:
    study_steps = load_study.__module__  # the parser is pure: build specs from the study file
    assert study_steps
    root = TESTS_DIR
    assert root.is_dir()
    from runner.steps._core import StepSpec

    label = StepSpec(
        "j",
        "trial",
        ("a",),
        root,
        (),
        "label",
        ("correct", "incorrect"),
        None,
        0,
        "exclude",
        "majority",
        "blind",
        None,
    )
    assert parse_output(label, "Incorrect.") == "incorrect"
    assert parse_output(label, "correct, not incorrect") is None  # two labels: unparseable
    assert parse_output(label, "It depends.") is None
    assert aggregate("majority", ["correct", "correct", "incorrect"]) == "correct"
    assert aggregate("majority", ["correct", "incorrect"]) is None
    assert aggregate("majority", ["correct", None, None]) is None
    assert aggregate("unanimous", ["correct", "correct"]) == "correct"
    assert aggregate("unanimous", ["correct", None]) is None
    assert aggregate(2, ["x", "y", "x"]) == "x"
    assert aggregate(3, ["x", "y", "x"]) is None


# ------------------------------------------------------------------ running


def test_every_step_call_is_recorded_before_it_is_answered(ran: Path) -> None:
    with Ledger.open(ran / "ledger.db", readonly=True) as log:
        evs = list(log.events())
        requested = {e.seq: e for e in evs if e.kind == "step.requested"}
        answered = [e for e in evs if e.kind == "step.responded"]
        assert answered and len(answered) == len(requested)
        for e in answered:
            req = requested[e.body["request_seq"]]
            assert req.seq < e.seq and e.body["call"] == req.body["call"]
        # each call id once per attempt: nothing sent twice
        seen = [(r.body["call"], r.body["attempt"]) for r in requested.values()]
        assert len(seen) == len(set(seen))
        # item steps before the trials that read them; judges after their trial's response
        first_trial = min(e.seq for e in evs if e.kind == "trial.requested")
        assert all(r.seq < first_trial for r in requested.values() if r.body["step"] != "judge")
        responded = {}
        trial_of = {e.seq: e.body["trial"] for e in evs if e.kind == "trial.requested"}
        for e in evs:
            if e.kind == "trial.responded":
                responded[trial_of[e.body["request_seq"]]] = e.seq
        judges = [r for r in requested.values() if r.body["step"] == "judge"]
        assert len(judges) >= 2 * len(responded)
        for r in judges:
            assert responded[r.body["trial"]] < r.seq
        # the trial requests carry the rewriter's output
        for e in evs:
            if e.kind == "trial.requested":
                text = json.loads(log.blob(e.blobs["request"]))["messages"][0]["content"][0]
                assert "Case: I have the condition" in text["text"]
        study = load_study(ran, strict=False)
        state = load_state(study, log)
    assert not state.pending()


def test_screened_items_are_recorded_exclusions(ran: Path) -> None:
    with Ledger.open(ran / "ledger.db", readonly=True) as log:
        evs = list(log.events())
        excluded = [e for e in evs if e.kind == "trial.excluded"]
        screen = {}
        for e in evs:
            if e.kind == "step.responded" and e.body["step"] == "screen":
                screen[e.body["call"]] = json.loads(log.blob(e.blobs["response"]))
    out = {c.split("|")[2] for c, r in screen.items() if r["content"][0]["text"] == "exclude"}
    assert out, "the simulated screen excludes some items (seeded)"
    assert {e.body["item"] for e in excluded} == out
    assert all(e.body["step"] == "screen" for e in excluded)


def test_status_counts_the_step_calls(ran: Path) -> None:
    result = invoke("status", ran, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    steps = {s["step"]: s for s in data["steps"]}
    assert steps["screen"]["calls"] == 8 and steps["screen"]["pending"] == 0
    with Ledger.open(ran / "ledger.db", readonly=True) as log:
        responded = sum(1 for _ in log.events("trial.responded"))
        judge_calls = sum(
            1
            for e in log.events("step.requested")
            if e.body["step"] == "judge" and e.body["attempt"] == 1
        )
    assert steps["judge"]["calls"] == judge_calls == 2 * responded
    assert data["events"]["step.responded"] == sum(
        s["parsed"] + s["unparseable_responses"] for s in steps.values()
    )


def test_restart_runs_only_what_is_missing(home: Path, tmp_path: Path, ran: Path) -> None:
    """A session stopped after some judge calls; the next runs only the calls left."""
    root = tmp_path / "study"
    shutil.copytree(ran.parent / "study", root, ignore=shutil.ignore_patterns("ledger.db*"))
    (root / "registration-checkpoint.txt").unlink()
    lock_study(root, KEY)
    first = run_study(root, KEY, SimulatedBackend(), RunOptions(concurrency=1, max_trials=3))
    assert first.reason.startswith("max-trials")
    second = run_study(root, KEY, SimulatedBackend(), RunOptions(concurrency=3))
    assert second.reason == "complete"
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        calls = [(e.body["call"], e.body["attempt"]) for e in log.events("step.requested")]
    with Ledger.open(ran / "ledger.db", readonly=True) as log:
        once = sorted((e.body["call"], e.body["attempt"]) for e in log.events("step.requested"))
    assert len(calls) == len(set(calls))
    assert sorted(calls) == once  # the same calls as one uninterrupted session, each once


# ------------------------------------------------------------------ judge agreement


def _judged(rows: list[list[str]]) -> list[dict[str, object]]:
    return [{"votes": [{"model": f"j{i}", "vote": v} for i, v in enumerate(row)]} for row in rows]


def test_cohens_kappa_matches_the_textbook_table() -> None:
    """Two judges, the 2x2 table [[20, 5], [10, 15]]: p_o 0.7, p_e 0.5, kappa 0.4."""
    from analysis._agreement import judge_agreement_values

    rows = (
        [["yes", "yes"]] * 20
        + [["yes", "no"]] * 5
        + [["no", "yes"]] * 10
        + [["no", "no"]] * 15
        + [["yes", None]]
    )
    values = judge_agreement_values(_judged(rows), ["yes", "no"])  # type: ignore[arg-type]
    assert values["method"] == "cohen" and values["n_trials"] == 50
    assert values["incomplete"] == 1
    assert values["kappa"] == pytest.approx(0.4, abs=1e-12)
    assert values["all_agree"] == pytest.approx(0.7)


def test_fleiss_kappa_matches_the_published_example() -> None:
    """Fleiss (1971) as Wikipedia works it: 10 subjects, 14 raters, 5 categories, 0.210."""
    from analysis._agreement import judge_agreement_values

    table = [
        [0, 0, 0, 0, 14],
        [0, 2, 6, 4, 2],
        [0, 0, 3, 5, 6],
        [0, 3, 9, 2, 0],
        [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0],
        [3, 2, 6, 3, 0],
        [2, 5, 3, 2, 2],
        [6, 5, 2, 1, 0],
        [0, 2, 2, 3, 7],
    ]
    labels = ["a", "b", "c", "d", "e"]
    rows = [[labels[j] for j, n in enumerate(counts) for _ in range(n)] for counts in table]
    values = judge_agreement_values(_judged(rows), labels)  # type: ignore[arg-type]
    n, m = 10, 14
    p_bar = sum((sum(x * x for x in r) - m) / (m * (m - 1)) for r in table) / n
    p_e = sum((sum(r[j] for r in table) / (n * m)) ** 2 for j in range(5))
    assert values["method"] == "fleiss"
    assert values["kappa"] == pytest.approx((p_bar - p_e) / (1 - p_e), abs=1e-12)
    assert round(values["kappa"], 3) == 0.210


# ------------------------------------------------------------------ bad step responses


class _Unsure(SimulatedBackend):
    """The simulation, except that judge_b never gives a verdict and the first rewrite of
    every item comes back empty (a rewriter that returns empty text)."""

    async def send(self, body: dict[str, object], *, seed: str):  # type: ignore[no-untyped-def]
        import json as _json

        from runner._backends import reply_from_messages_json

        reply = await super().send(body, seed=seed)
        text = None
        if "|step:judge|judge_b|" in seed:
            text = "It depends on the context."
        elif "|step:rewrite|" in seed and seed.endswith("|1"):
            text = ""
        if text is None:
            return reply
        data = _json.loads(reply.raw)
        data["content"] = [{"type": "text", "text": text}]
        return reply_from_messages_json(_json.dumps(data).encode(), 200, None)


@pytest.fixture(scope="module")
def unsure(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from analysis._scoring import score_study

    root = write_study(tmp_path_factory.mktemp("unsure") / "study")
    lock_study(root, KEY)
    result = run_study(root, KEY, _Unsure(), RunOptions(concurrency=4))
    assert result.reason == "complete"
    score_study(root, KEY)
    return root


def test_rewriter_empty_text_is_retried_by_rule(unsure: Path) -> None:
    with Ledger.open(unsure / "ledger.db", readonly=True) as log:
        rewrites = [e.body for e in log.events("step.requested") if e.body["step"] == "rewrite"]
    attempts: dict[str, int] = {}
    for body in rewrites:
        attempts[body["call"]] = max(attempts.get(body["call"], 0), body["attempt"])
    assert len(attempts) == 8 and set(attempts.values()) == {2}  # empty, then a rewrite
    status = json.loads(invoke("status", unsure, "--json").output)
    rewrite = next(s for s in status["steps"] if s["step"] == "rewrite")
    assert rewrite["unparseable_responses"] == 8 and rewrite["parsed"] == 8


def test_unparseable_judge_is_retried_counted_and_never_scored(unsure: Path) -> None:
    with Ledger.open(unsure / "ledger.db", readonly=True) as log:
        judge_b = [
            e.body
            for e in log.events("step.requested")
            if e.body["call"].startswith("step:judge|judge_b|")
        ]
        scored = [e.body for e in log.events("trial.scored")]
        answered = sum(1 for _ in log.events("trial.responded"))
    # retry = 1: two calls each, both recorded, then the vote is missing
    assert len(judge_b) == 2 * answered
    assert scored and len(scored) == answered
    for body in scored:
        b_vote = body["judge"]["votes"][1]
        assert b_vote["status"] == "unparseable" and b_vote["vote"] is None
        assert b_vote["responses"] == 2
        assert body["judge"]["decision"] is None  # majority of two needs both
        assert body["status"] == "unparseable" and body["n_correct"] == 0
        assert "reached no decision" in body["problems"][0]
    status = json.loads(invoke("status", unsure, "--json").output)
    judge = next(s for s in status["steps"] if s["step"] == "judge")
    unparsed = sum(
        v["responses"] - (v["status"] == "parsed") for b in scored for v in b["judge"]["votes"]
    )
    assert judge["unparseable_responses"] == unparsed >= 2 * answered
    assert judge["undecided"] == answered


def test_estimate_counts_the_step_calls(home: Path, tmp_path: Path) -> None:
    """Before the run: 8 screen + 8 rewrite calls, 2 judges on each of the 24 trials."""
    root = write_study(tmp_path / "study")
    lock_study(root, KEY)
    data = json.loads(invoke("estimate", root, "--backend", "simulated", "--json").output)
    assert data["step_calls"] == 8 + 8 + 2 * 24
    assert data["step_output_tokens_max"] == 16 * (8 + 8 + 2 * 24)  # each step model: 16
    assert data["step_input_tokens"] > 0 and data["pending"] == 24
    priced = json.loads(
        invoke(
            "estimate",
            root,
            "--backend",
            "simulated",
            "--json",
            "--price-in",
            "1",
            "--price-out",
            "1",
        ).output
    )
    total = priced["input_tokens"] + priced["step_input_tokens"]
    assert priced["cost_min_usd"] == pytest.approx(total / 1_000_000)


# ------------------------------------------------------------------ answer-dependent arms


def test_second_stage_is_rendered_from_the_first_stage_response(ran: Path) -> None:
    with Ledger.open(ran / "ledger.db", readonly=True) as log:
        evs = list(log.events())
        texts: dict[str, str] = {}
        responded: dict[str, int] = {}
        trial_of = {e.seq: e.body["trial"] for e in evs if e.kind == "trial.requested"}
        for e in evs:
            if e.kind == "trial.responded":
                body = json.loads(log.blob(e.blobs["response"]))
                texts[trial_of[e.body["request_seq"]]] = body["content"][0]["text"]
                responded[trial_of[e.body["request_seq"]]] = e.seq
        doubts = [e for e in evs if e.kind == "trial.requested" and e.body["arm"] == "doubt"]
        assert doubts
        for e in doubts:
            prior = "plain|" + e.body["trial"].split("|", 1)[1]
            assert responded[prior] < e.seq  # sent only after its first stage answered
            text = json.loads(log.blob(e.blobs["request"]))["messages"][0]["content"][0]["text"]
            assert f"Earlier you answered: {texts[prior]}\nAnother clinician" in text


def test_after_an_unknown_or_second_stage_arm_is_refused(tmp_path: Path) -> None:
    root = write_study(tmp_path / "s")
    spec = (root / "study.toml").read_text()
    (root / "study.toml").write_text(
        spec.replace('after = { arm = "plain" }', 'after = { arm = "plane" }')
    )
    with pytest.raises(SpecError, match=r"arms.doubt.after: unknown arm 'plane'"):
        load_study(root)
    (root / "study.toml").write_text(
        spec.replace(
            'models = ["target"]\n\n[arms.sys]',
            'models = ["target"]\nafter = { arm = "doubt" }\n\n[arms.sys]',
        )
    )
    with pytest.raises(SpecError, match="is itself answer-dependent"):
        load_study(root)


def test_prior_answer_without_an_answer_step_is_refused(tmp_path: Path, home: Path) -> None:
    root = write_study(tmp_path / "s", doubt="You answered {prior.answer}. Sure?\n")
    out = lock_refused(root)
    assert "slot {prior.answer}: an answer-dependent arm's components may use only" in out


class _GivesUp(SimulatedBackend):
    """The simulation, except that one first-stage trial always fails (HTTP 500)."""

    async def send(self, body: dict[str, object], *, seed: str):  # type: ignore[no-untyped-def]
        from runner._backends import BackendError

        if "|plain|target|q02|1|" in seed:
            raise BackendError("server", "HTTP 500: boom", http_status=500, retryable=True)
        return await super().send(body, seed=seed)


def test_given_up_first_stage_makes_a_recorded_exclusion(home: Path, tmp_path: Path) -> None:
    root = write_study(tmp_path / "study")
    lock_study(root, KEY)
    options = RunOptions(concurrency=2, max_attempts=2, backoff_base=0.0, backoff_max=0.0)
    assert run_study(root, KEY, _GivesUp(), options).reason == "complete"
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        excluded = {e.body["trial"]: e.body for e in log.events("trial.excluded")}
        given_up = [e.body for e in log.events("trial.failed") if e.body["final"]]
    assert [b["trial"] for b in given_up] == ["plain|target|q02|1"]
    doubt = excluded["doubt|target|q02|1"]
    assert doubt["prior"] == "plain|target|q02|1" and "no response" in doubt["reason"]


class _RefusesLateJudges(SimulatedBackend):
    """The simulation, except that judge calls on second-stage trials are refused (HTTP 400)."""

    async def send(self, body: dict[str, object], *, seed: str):  # type: ignore[no-untyped-def]
        from runner._backends import BackendError

        if "|step:judge|" in seed and "|doubt|" in seed:
            raise BackendError(
                "invalid_request_error", "HTTP 400: no", http_status=400, retryable=False
            )
        return await super().send(body, seed=seed)


def test_a_session_with_only_judges_left_runs_them(home: Path, tmp_path: Path) -> None:
    """Every trial final, some judge calls not: the next session sends those calls alone."""
    root = write_study(tmp_path / "study")
    lock_study(root, KEY)
    first = run_study(root, KEY, _RefusesLateJudges(), RunOptions(concurrency=2))
    assert first.reason.startswith("error:") and first.pending == 0
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        before = sum(1 for _ in log.events("trial.requested"))
    second = run_study(root, KEY, SimulatedBackend(), RunOptions(concurrency=2))
    assert second.reason == "complete"
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        assert sum(1 for _ in log.events("trial.requested")) == before  # no trial again
        session = [e for e in log.events() if e.seq > second.started_seq]
        judged = {e.body["trial"] for e in session if e.kind == "step.requested"}
    assert judged and all(t.startswith("doubt|") for t in judged)


def test_batch_backend_is_refused_before_anything_is_recorded(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner._engines import make_backend
    from runner._lock import StudyError

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    root = write_study(tmp_path / "study")
    lock_study(root, KEY)
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        size = log.size
    backend = make_backend("anthropic-batch", base_url="http://127.0.0.1:9")
    with pytest.raises(StudyError, match="model steps or answer-dependent arms"):
        run_study(root, KEY, backend, RunOptions())
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        assert log.size == size


# ------------------------------------------------------------------ human review


def test_review_sample_is_seeded_and_stratified_by_agreement() -> None:
    from runner.steps._core import review_sample
    from verify._steps import review_sample as verify_sample

    judged = [(s, s % 3 == 0) for s in range(100, 160)]
    sample = review_sample(judged, 4, "9")
    assert sample == verify_sample(judged, 4, "9") == sorted(sample)
    assert sum(s % 3 == 0 for s in sample) == 4 and len(sample) == 8
    assert review_sample(judged, 4, "10") != sample  # the seed draws it


def test_review_needs_a_reviewer_key_and_a_subject_of_the_sample(unsure: Path) -> None:
    from analysis._reviewing import record_review, review_subjects
    from ledger import SigningKey
    from runner._lock import StudyError

    subjects = review_subjects(unsure, "audit")
    assert subjects and all(s.decision is None for s in subjects)  # judge_b never decides
    with pytest.raises(StudyError, match="role 'reviewer'"):
        record_review(unsure, KEY, "audit", subjects[0].response_seq, "correct")
    reviewer = SigningKey.generate("steps.example/reviewer")
    with Ledger.open(unsure / "ledger.db") as log:
        log.add_key(reviewer.vkey, "reviewer", key=KEY)
        size = log.size
    with pytest.raises(StudyError, match="is not in review sample 'audit'"):
        record_review(unsure, reviewer, "audit", 1, "correct")
    with pytest.raises(StudyError, match="is not a label"):
        record_review(unsure, reviewer, "audit", subjects[0].response_seq, "maybe")
    with Ledger.open(unsure / "ledger.db", readonly=True) as log:
        assert log.size == size
    seq = record_review(unsure, reviewer, "audit", subjects[0].response_seq, "incorrect")
    assert review_subjects(unsure, "audit")[0].reviewed == ("incorrect",)
    from ledger import AuthorizationError

    with Ledger.open(unsure / "ledger.db") as log:
        assert log.get(seq).kind == "review.recorded"
        with pytest.raises(AuthorizationError):  # a reviewer key may append nothing else
            log.append("analysis.result", {"id": "x"}, key=reviewer)
