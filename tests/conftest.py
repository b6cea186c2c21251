"""Shared fixtures (keys, a fixed clock, small ledgers, studies built once per session) and
how the parallel run (pytest-xdist, see README) hands tests to workers.

Session-scoped fixtures are built once per xdist worker, each in that worker's own
``tmp_path_factory`` directory, except those made with :func:`built_once` (the simulated
archive): built by one worker and shared by all of the run's. Tests must not change what a
session- or module-scoped fixture returns; they copy it (``shutil.copytree``) and change the
copy.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import fixed_clock, fixed_key
from hypothesis import settings

from ledger import Ledger, SigningKey

# One BLAS thread per process: pytest-xdist runs one worker per core already, and OpenBLAS's
# own threads (one per core, spinning while they wait) would then fight the other workers for
# the same cores: on two cores a verification took 4.1 s of CPU with them and 2.5 s without, in
# the same wall time. Set before numpy is imported; subprocesses inherit it.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

# No hypothesis example has a time limit: its default 200 ms deadline is a timing assertion,
# and on a loaded two-core machine an ordinary example can take longer (a flaky failure that
# says nothing about the code).
settings.register_profile("project", deadline=None)
settings.load_profile("project")

PROJECT_PACKAGES = ("ledger", "runner", "analysis", "verify")


def pytest_configure(config: pytest.Config) -> None:
    """Compile the project's bytecode once, in the controller, before any worker starts.

    The tests start some hundreds of ``ledger`` and ``python -m verify`` processes (the kill
    soaks fork theirs from one process that imported the runner once: ``forked_cli``). Where
    ``PYTHONDONTWRITEBYTECODE`` is set (some CI images and sandboxes set it) each of them, and
    each xdist worker, would compile every module of the project from source again (about
    0.2 s a process on two cores); an installed package has its bytecode compiled once by pip,
    and so has the checkout here (``__pycache__`` is git-ignored; up-to-date files are
    skipped).
    """
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did it
        return
    import compileall

    root = Path(__file__).resolve().parent.parent
    for package in PROJECT_PACKAGES:
        compileall.compile_dir(str(root / package), quiet=1)
    _rewrite_test_modules(config, Path(__file__).resolve().parent)


_REWRITE_CONFIG: list[pytest.Config] = []
"""The run's config, for the forked processes of :func:`_rewrite_test_modules`."""


def _rewrite_one(path: str) -> None:
    """Rewrite one test module's asserts and write pytest's cached pyc of it (a forked child)."""
    from _pytest.assertion import rewrite

    fn = Path(path)
    source_hash, code = rewrite._rewrite_test(fn, _REWRITE_CONFIG[0])
    cache_dir = rewrite.get_cache_dir(fn)
    if rewrite.try_makedirs(cache_dir):
        state = _REWRITE_CONFIG[0].stash[rewrite.assertstate_key]
        rewrite._write_pyc(state, code, source_hash, cache_dir / (fn.name[:-3] + rewrite.PYC_TAIL))


def _rewrite_test_modules(config: pytest.Config, tests: Path) -> None:
    """Rewrite the test modules' asserts once, in the controller, on every core, before the
    workers collect.

    pytest rewrites each test module's ``assert`` statements when it imports it and caches the
    result in ``__pycache__`` unless ``sys.dont_write_bytecode`` (``PYTHONDONTWRITEBYTECODE``);
    each xdist worker imports every module, so without a cache each rewrote all of them (about
    9.5 s of a worker's 15 s of collection on two cores). Written here as pytest itself writes
    them (atomically, by rename), and only for modules whose cached pyc is missing or stale; a
    pytest whose private rewrite functions differ is left to rewrite as it always does.
    """
    import importlib.util
    import multiprocessing

    if config.getoption("assertmode", "rewrite") != "rewrite":
        return
    try:
        from _pytest.assertion import rewrite

        tail, get_cache_dir = rewrite.PYC_TAIL, rewrite.get_cache_dir
        rewrite._rewrite_test, rewrite._write_pyc, rewrite.assertstate_key  # noqa: B018
    except (ImportError, AttributeError):
        return
    todo = []
    for fn in sorted([*tests.rglob("test_*.py"), *tests.rglob("conftest.py")]):
        pyc = get_cache_dir(fn) / (fn.name[:-3] + tail)
        try:
            with pyc.open("rb") as cached:
                header = cached.read(16)  # magic, flags and source hash: the rest is code
        except OSError:
            header = b""
        fresh = header[:8] == importlib.util.MAGIC_NUMBER + b"\x03\x00\x00\x00"
        if not fresh or importlib.util.source_hash(fn.read_bytes())[:8] != header[8:16]:
            todo.append(str(fn))
    if not todo:
        return
    _REWRITE_CONFIG[:] = [config]
    processes = min(len(todo), os.cpu_count() or 1, 8)
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        pool.map(_rewrite_one, todo, chunksize=1)


SERIAL_MODULES = frozenset(
    f"tests/{name}.py"
    for name in (
        "ledger/test_faults",
        "runner/test_runner",
        "runner/test_runner_audit",
        "runner/test_runner_crash",
        "runner/test_run_interrupt",
        "ledger/test_witness",
    )
)
"""Modules whose tests start processes and SIGKILL or SIGINT them, or depend on timeouts,
Retry-After and overload timing: with ``--dist loadfile`` they form one unit of work, so they
run on one worker one after another and never beside each other."""

SPREAD_MODULES = frozenset(
    f"tests/{name}.py"
    for name in (
        "verify/test_hostile_archive",
        "e2e/test_archive",
        "project/test_benchmark_runs",
        "verify/test_conformance",
        "verify/test_conformance_soak",
    )
)
"""Large modules of independent tests (no module-scoped fixture; each copies what it changes):
each test is its own unit of work, so the module is spread over the workers instead of
holding one of them for minutes."""


LONG_UNITS = (
    # the slow set's longest (CI's `-m slow` run; in the README's set they are short)
    "serial: processes and timing",
    "tests/runner/test_cloud_backends.py",
    "tests/analysis/test_view_browser.py",
    "tests/e2e/test_template_green.py",
    "tests/verify/test_conformance_soak.py::test_conformance_soak[0]",
    "tests/verify/test_conformance_soak.py::test_conformance_soak[1]",
    "tests/runner/test_phases.py",
    "tests/analysis/test_reml_maximum.py",
    "tests/runner/test_workers.py",
    "tests/e2e/test_template_mcq_data.py",
    "tests/runner/test_steps_crash.py",
    "tests/runner/test_steps_seed_crash.py",
    "tests/e2e/test_template_mcq.py",
    # the README's set, longest first
    "tests/ledger/test_serve_append.py",
    "tests/verify/test_archive_tamper.py",
    "tests/e2e/test_demo.py",
    "tests/ledger/test_store_postgres.py",
    "tests/analysis/test_report.py",
    "tests/e2e/test_several_models.py",
    "tests/analysis/test_analysis_pipeline.py",
    "tests/e2e/test_single_answer_studies.py",
    "tests/project/test_bad_input_fs.py",
    "tests/e2e/test_readme_commands.py",
    "tests/analysis/test_view_hostile.py",
    "tests/e2e/test_text_studies.py",
    "tests/analysis/test_sensitivity.py",
    "tests/verify/test_verify_science.py",
    "tests/analysis/test_gee_degenerate.py",
    "tests/analysis/test_mcq_hypotheses.py",
    "tests/analysis/test_privacy.py",
    "tests/verify/test_verify_text_study.py",
    "tests/ledger/test_tiles.py",
    "tests/runner/test_study_witness.py",
    "tests/verify/test_verify_reml.py",
    "tests/analysis/test_human_inputs.py",
    "tests/analysis/test_parse_score.py",
    "tests/e2e/test_readme_library.py",
    "tests/runner/test_provenance.py",
    "tests/analysis/test_ddx.py",
    "tests/analysis/test_reporting.py",
    "tests/analysis/test_stats.py",
    "tests/analysis/test_load.py",
    "tests/runner/test_model_identity.py",
    "tests/ledger/test_serve_commands.py",
    "tests/runner/test_study_language.py",
    "tests/ledger/test_canonical.py",
    "tests/analysis/test_plan.py",
    "tests/verify/test_verify_postgres.py",
    "tests/verify/test_verify_sessions.py",
    "tests/project/test_cli_house.py",
)
"""Units of work that take longest, longest first. They are handed out first, so that the two
workers end together instead of one finishing a long unit alone at the end; every other unit
follows in collection order, and the single tests of :data:`SPREAD_MODULES` come last, where
they fill the gaps. The slow set's (CI's ``-m slow`` run, on two cores): the serial unit about
90 s, the cloud backends' module about 2 minutes, the browser tests (run with the slow set by
.ci/run) about 2 minutes with the two demo builds they share with the demo modules
(:func:`shared_demo`), each conformance soak chunk about a
minute, the judge-phase kill soak 56 s, the REML module's 10,010-trial study 52 s, the medmcqa
demo module 45 s. The README's set, summed per-file durations on a clean clone (``pytest
--durations=0``, two quiet cores, issue 33): the serial unit 42 s, the service and
archive-tamper modules about 22 s, the demo about 17 s, PostgreSQL 14 s, the report 12 s, then
11 s down to 3.6 s in this order (the workers' and README modules after their forked workers
and one-jq audit, about 9 s each). The demo modules whose demo the browser tests build
(``test_template_mcq.py``, ``test_template_pilot.py``) come well after the browser module, so
that they find the build made instead of waiting on the worker that makes it."""


def _unit(nodeid: str) -> str:
    """The unit of work a test belongs to (see :func:`pytest_xdist_make_scheduler`)."""
    path = nodeid.split("::", 1)[0]
    if path in SERIAL_MODULES:
        return "serial: processes and timing"
    return nodeid if path in SPREAD_MODULES else path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the tests of :data:`LONG_UNITS` to the front, longest unit first, and the single
    tests of :data:`SPREAD_MODULES` to the end (stable otherwise)."""
    rank = {unit: i for i, unit in enumerate(LONG_UNITS)}

    def order(item: pytest.Item) -> int:
        unit = _unit(item.nodeid)
        if unit in rank:
            return rank[unit]
        return len(rank) + (unit == item.nodeid)  # a spread module's test: one of the last

    items.sort(key=order)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` (pyproject's addopts), with :data:`SERIAL_MODULES` as one unit.

    A file is one unit of work, so a module-scoped fixture (a study run and analysed once for
    its module) is built on one worker only. This replaces ``xdist_group`` marks with
    ``--dist loadgroup``, which pytest-xdist 3.8 cannot honour on pytest 9.2: it tags a test's
    group onto ``item._nodeid``, which pytest 9.2's ``item.nodeid`` no longer reads, so every
    mark is silently ignored (pytest-dev/pytest-xdist#1386). Other ``--dist`` modes are left to
    pytest-xdist.

    Units are handed out in collection order (:func:`pytest_collection_modifyitems`: the
    :data:`LONG_UNITS` first). pytest-xdist's ``--loadscope-reorder``, on by default, would
    sort them by their number of tests instead (most first), which put every unit of one test
    (a conformance-soak chunk, the 10,010-trial REML study, the kill soaks) behind every
    module of two or more, whatever its length: it is turned off here.
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False

    class SerialAwareLoadFile(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return SerialAwareLoadFile(config, log)


@pytest.fixture
def owner() -> SigningKey:
    return fixed_key("example.org/owner")


@pytest.fixture
def runner() -> SigningKey:
    return fixed_key("example.org/runner")


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def log(ledger_path: Path, owner: SigningKey, runner: SigningKey) -> Iterator[Ledger]:
    with Ledger.create(
        ledger_path, origin="example.org/test", key=owner, clock=fixed_clock()
    ) as ledger:
        ledger.add_key(runner.vkey, "runner", key=owner)
        yield ledger


@pytest.fixture(scope="session")
def study_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tumbling-E template with its stimuli drawn once per test session (no ledger)."""
    from helpers import study_key

    from runner._new import new_study

    root = tmp_path_factory.mktemp("template") / "study"
    new_study(root, "prompt-tumbling-e", study_key())
    (root / "ledger.db").unlink()
    return root


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]
) -> Path:
    """The folder ``name``, filled by ``build`` once per test run and shared by its workers.

    Without pytest-xdist: a folder of this session. Under it, every worker's ``basetemp`` lies
    in one folder of the run; the first worker to get here builds ``name`` there while it holds
    an exclusive ``fcntl.flock`` and marks it built, and the others wait for the lock and take
    the same folder (the pytest-xdist docs' recipe for a session fixture executed once). A
    build that failed half-way is removed and tried again by the next worker. Read-only for
    tests, as every session fixture is (copy it to change it): the other workers share it.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        out = tmp_path_factory.mktemp(name)
        build(out)
        return out
    import fcntl
    import shutil

    run = tmp_path_factory.getbasetemp().parent
    out = run / name
    with open(run / f"{name}.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (out / ".built").exists():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            build(out)
            (out / ".built").touch()
    return out


@pytest.fixture(scope="session")
def simulated_archive(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Path:
    """A fresh export of a simulated study (2 replicates: 70 trials), built once per test run.

    Run, scored, unblinded, analysed and exported with the study's owner key and a private
    ``PROMPT_LEDGER_HOME``. The archive is ``<base>/archive``; the study it was exported from
    is ``<base>/study`` beside it. Built once for all the xdist workers (:func:`built_once`):
    read-only for tests, copy it to change it.
    """
    from helpers import make_study, study_key

    from analysis._analyze import analyze_study
    from analysis._export import export_study
    from analysis._scoring import score_study, unblind_study
    from runner._backends import SimulatedBackend
    from runner._execute import RunOptions, run_study

    def build(base: Path) -> None:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
            template = request.getfixturevalue("study_template")  # by the builder only
            root = make_study(base / "study", replicates=2, template=template)
            key = study_key()
            run_study(root, key, SimulatedBackend(), RunOptions(concurrency=8))
            score_study(root, key)
            unblind_study(root, key)
            analyze_study(root, key)
            export_study(root, base / "archive", key)

    return built_once(tmp_path_factory, "simulated-archive", build) / "archive"


@pytest.fixture(scope="session")
def simulated_report(simulated_archive: Path) -> Any:
    """``verify_archive`` of :func:`simulated_archive` (no trusted key, no published checkpoint):
    one whole verification per session, shared by the tests that read the honest report.
    Read-only (a ``verify.Report``)."""
    from verify import verify_archive

    return verify_archive(simulated_archive)


@pytest.fixture
def ledger_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private PROMPT_LEDGER_HOME (keys and blinding secrets) for one test."""
    home = tmp_path / "home"
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real PostgreSQL server for this worker's session, with an empty ``ledgers`` database.

    Started from the installed binaries (``tests/support/pg_server.py``); the tests that use it
    skip, saying why, only where no PostgreSQL binaries exist (``.ci/run`` installs Debian's
    ``postgresql`` when they are missing, so CI always runs them).
    """
    from pg_server import PW_USER, PW_USER_PASSWORD, PgServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL binaries (pg_ctl, postgres) found; apt-get install postgresql")
    # As root the server runs as the postgres user, who cannot enter pytest's temporary
    # directories (mode 0700, owned by root): PgServer then makes a directory of its own.
    server = PgServer(tmp_path_factory.mktemp("pg"), bindir)
    try:
        server.init()
        server.start()
        server.createdb("ledgers")
        server.psql(f"CREATE ROLE {PW_USER} LOGIN PASSWORD '{PW_USER_PASSWORD}'")
        server.psql(f"GRANT ALL ON DATABASE ledgers TO {PW_USER}")
        yield server
    finally:
        server.stop()
        server.remove()


@pytest.fixture(scope="session")
def shared_demo(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., tuple[Any, str]]:
    """``shared_demo(template, width=220)``: that template's ``ledger demo``, built once per test
    run (:func:`built_once`) and shared by every module that reads it: (its ``DemoResult``, what
    it printed on a console ``width`` columns wide).

    The demo modules (``tests/e2e/test_template_*.py``) and the browser tests
    (``tests/analysis/test_view_browser.py``) read the same demos: each build (tens of seconds)
    is made once instead of once per module. Built by ``tests/support/demo_build.py`` in a
    process of its own (see there why). Read-only, as every shared build is: copy it to change
    it.
    """
    import json
    import subprocess
    import sys

    from analysis._demo import DemoResult

    made: dict[tuple[str, int], Path] = {}  # this session's: built_once builds at every call

    def get(template: str, width: int = 220) -> tuple[Any, str]:
        def build(base: Path) -> None:
            built = subprocess.run(
                [
                    sys.executable,
                    str(Path(__file__).resolve().parent / "support" / "demo_build.py"),
                    str(base),
                    template,
                    str(width),
                ],
                capture_output=True,
                text=True,
                timeout=900,
                env={**os.environ, "PROMPT_LEDGER_HOME": str(base / "home")},
            )
            assert built.returncode == 0, (
                f"ledger demo --template {template}: exit {built.returncode}\n"
                + built.stdout[-2000:]
                + built.stderr[-4000:]
            )

        if (template, width) not in made:
            made[template, width] = built_once(tmp_path_factory, f"demo-{template}-{width}", build)
        base = made[template, width]
        fields = json.loads((base / "result.json").read_text(encoding="utf-8"))
        paths = {"study", "archive", "tampered", "report"}
        result = DemoResult(
            **{k: Path(v) if k in paths and v is not None else v for k, v in fields.items()}
        )
        return result, (base / "printed.txt").read_text(encoding="utf-8")

    return get
