"""Benchmark: ``ledger view`` on archives of 10,000 and 100,000 trials, and a run it watches.

    python benchmarks/bench_view.py [--trials 10000 100000] [--runner] [--quick]

Pages. A real archive of 70 simulated trials is built once (lock, run, score, unblind,
analyse, export: :func:`bench_verify.build_archive`); each larger archive is then grown from
its events: every trial's ``trial.requested`` / ``trial.responded`` / ``trial.scored`` triple
is repeated with new replicate numbers, seqs and positions, pointing at the real request,
response and score blobs (as replicates of one arm and stimulus do), and the events after the
run follow. The grown archive has the layout the viewer reads (``ledger/events.jsonl``,
``blobs/``) but its signatures and chain are copies, so it does not verify: the pages are
timed with the background verification off (``open_viewer(verify=False)``), and building the
archive is not timed. Each size is measured in a fresh process, so its peak resident memory
is its own: the index build, then requests (Starlette's TestClient, in process) of the
first table page, a deep page, filtered and sorted pages, a trial page, a
comparison and a proof (the first request of each, with nothing memoized for it, then the
median and worst of 5 more), against the targets (a page under 1 s, a trial page under 200 ms)
and against a floor measured in the same run (``/api/status``: routing, no page).

Run with a viewer (``--runner``): ``bench_runner``'s quick configuration (fake Messages
server at 0 ms, concurrency 1 and 8) runs fresh copies of one locked study, alternately with
no viewer and with ``ledger view`` (a real server, in its own process, its start-up
verification finished) polled every 1.5 s (what a page does) and every 0.1 s (``/api/status``
and ``/trials`` each time), and prints trials per second of both and their ratio. The viewer
reads through its own ``mode=ro`` connection; on a machine with few cores what it costs the
run is CPU, which the 0.1 s row exaggerates on purpose.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for extra in (ROOT, ROOT / "benchmarks"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

PAGE_TARGET = 1.0
TRIAL_TARGET = 0.2
SEARCH_TARGET = 0.3
_TRIAL_KINDS = ("trial.requested", "trial.responded", "trial.scored")
POLLS = (1.5, 0.1)  # the page's own interval, and fifteen times as often
POLLER = """
import sys, threading, httpx
url, every = sys.argv[1], float(sys.argv[2])
stop, polls = threading.Event(), 0
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
with httpx.Client(base_url=url, timeout=30) as http:
    while not stop.is_set():
        http.get("/api/status")
        http.get("/trials")
        polls += 1
        if polls == 1:
            print("polling", flush=True)
        stop.wait(every)
print(polls)
"""
"""A browser's polling (the overview's status and the trial table), as a process of its own."""


def base_archive(cache: Path) -> Path:
    """The real 70-trial archive the larger ones grow from (built once, then cached)."""
    from bench_verify import build_archive

    target = cache / "base-archive"
    if not (cache / "base-archive.done").exists():
        seconds = build_archive(target, 2)
        (cache / "base-archive.done").write_text(f"{seconds:.1f}\n")
    return target


def grow(base: Path, target: Path, trials: int) -> None:
    """Write an archive of ``trials`` trials from the events and blobs of ``base``."""
    lines = [json.loads(line) for line in (base / "ledger/events.jsonl").read_bytes().splitlines()]
    envs = [line["envelope"] for line in lines]
    signature = lines[0]["signature"]
    first = next(i for i, e in enumerate(envs) if e["kind"] == "trial.requested")
    last_run = max(
        i for i, e in enumerate(envs) if e["kind"] in ("trial.responded", "trial.failed")
    )
    head = envs[:first]
    tail = [e for e in envs[last_run + 1 :] if e["kind"] not in _TRIAL_KINDS]
    triples = []
    for req in (e for e in envs if e["kind"] == "trial.requested"):
        resp = next(
            e
            for e in envs
            if e["kind"] == "trial.responded" and e["body"]["request_seq"] == req["seq"]
        )
        score = next(
            e
            for e in envs
            if e["kind"] == "trial.scored" and e["body"]["response_seq"] == resp["seq"]
        )
        triples.append((req, resp, score))
    combos: dict[str, list[tuple[dict[str, Any], ...]]] = {}
    for triple in triples:
        combos.setdefault(triple[0]["body"]["trial"].rsplit("|", 1)[0], []).append(triple)
    names = sorted(combos)
    shutil.rmtree(target, ignore_errors=True)
    (target / "ledger").mkdir(parents=True)
    shutil.copytree(base / "blobs", target / "blobs")
    seq = 0
    scored: list[tuple[dict[str, Any], int]] = []
    with (target / "ledger/events.jsonl").open("w", encoding="utf-8") as out:

        def write(env: dict[str, Any]) -> int:
            nonlocal seq
            env = {**env, "seq": seq}
            out.write(
                json.dumps(
                    {"envelope": env, "signature": signature}, separators=(",", ":"), sort_keys=True
                )
                + "\n"
            )
            seq += 1
            return seq - 1

        for env in head:
            if env["kind"] == "protocol.locked":
                env = {**env, "body": {**env["body"], "trials": trials}}
            write(env)
        for i in range(trials):
            arm_stim, rep = names[i % len(names)], i // len(names) + 1
            req, resp, score = combos[arm_stim][rep % len(combos[arm_stim])]
            trial = f"{arm_stim}|{rep}"
            rseq = write(
                {**req, "body": {**req["body"], "trial": trial, "rep": rep, "position": i + 1}}
            )
            oseq = write({**resp, "body": {**resp["body"], "trial": trial, "request_seq": rseq}})
            scored.append((score, oseq))
        for score, oseq in scored:
            write({**score, "body": {**score["body"], "response_seq": oseq}})
        for env in tail:
            write(env)


def _median_worst(fn: Any, n: int = 5) -> tuple[float, float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), max(times)


def measure(archive: Path) -> dict[str, Any]:
    """Index ``archive`` and time its pages (run in a fresh process: see :func:`main`)."""
    from starlette.testclient import TestClient

    from analysis.view import make_app, open_viewer

    started = time.perf_counter()
    viewer = open_viewer(archive, verify=False)
    index_s = time.perf_counter() - started
    client = TestClient(make_app(viewer), base_url="http://127.0.0.1")
    total = viewer.index.query("SELECT COUNT(*) FROM trials")[0][0]
    h = viewer.index.query("SELECT h FROM trials ORDER BY h LIMIT 1 OFFSET ?", (total // 2,))[0][0]
    last_seq = viewer.index.next_seq - 1
    pages = {
        "status floor": "/api/status",
        "overview": "/",
        "first page": "/trials",
        "deep page": f"/trials?page={max(1, total // 50 - 1)}",
        "filter arm": "/trials?arm=B",
        "filter code+stimulus": "/trials?code="
        + str(viewer.index.codes.get("C", ""))
        + "&stimulus=mixed-1",
        "filter status+correct": "/trials?status=responded&correct=incorrect",
        "filter parse, sorted": "/trials?parse=ok&sort=accuracy&desc=1",
        "filter JSON": "/trials?stimulus=uniform-up&format=json",
        "search": "/trials?q=orientations",
        "search phrase, filtered": '/trials?q="chart type"&correct=incorrect',
        "plots page": "/plots",
        "plot accuracy (SVG)": "/plot/accuracy.svg",
        "item page": "/item/mixed-1",
        "trial page": f"/trial/{h}",
        "comparison": f"/compare?stimulus=mixed-1&rep={total // 70}",
        "proof": f"/proof/{last_seq}",
    }
    results = {}
    for name, url in pages.items():
        start = time.perf_counter()
        response = client.get(url)
        cold = time.perf_counter() - start
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}: {response.text[:300]}")
        results[name] = (cold, *_median_worst(lambda url=url: client.get(url)))
    viewer.index.close()
    size = sum(f.stat().st_size for f in archive.rglob("*") if f.is_file())
    return {
        "trials": total,
        "events": last_seq + 1,
        "bytes": size,
        "index_s": index_s,
        "pages": results,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def pages_report(rows: list[dict[str, Any]]) -> None:
    """Print the page timings of every size."""
    print(
        f"ledger view on grown archives (pages in process, verification off), "
        f"{os.cpu_count()} cores"
    )
    for row in rows:
        floor = row["pages"]["status floor"][1]
        print(
            f"\n{row['trials']:,} trials, {row['events']:,} events, "
            f"{row['bytes'] / 1e6:,.1f} MB on disk: index built in {row['index_s']:.1f} s, "
            f"peak RSS {row['peak_mb']:.0f} MB"
        )
        print(
            f"  {'page':<24} {'first ms':>9} {'median ms':>9} {'worst ms':>9} "
            f"{'target ms':>9} {'worst/target':>12} {'x floor':>8}"
        )
        for name, (cold, median, worst) in row["pages"].items():
            target = (
                TRIAL_TARGET
                if name == "trial page"
                else SEARCH_TARGET
                if name.startswith("search")
                else PAGE_TARGET
            )
            print(
                f"  {name:<24} {cold * 1000:9.1f} {median * 1000:9.1f} {worst * 1000:9.1f} "
                f"{target * 1000:9.0f} {max(cold, worst) / target:12.3f} "
                f"{median / floor:8.1f}"
            )
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        print(
            f"\npeak RSS {a['peak_mb']:.0f} MB at {a['trials']:,} trials, {b['peak_mb']:.0f} MB "
            f"at {b['trials']:,} ({b['trials'] / a['trials']:.0f}x the trials: "
            f"{b['peak_mb'] / a['peak_mb']:.2f}x the memory)"
        )


# ---------------------------------------------------------------------- a run, watched


def _run_once(base_url: str, locked: Path, work: Path, conc: int, poll_s: float | None) -> float:
    from ledger import SigningKey
    from runner import AnthropicBackend, RunOptions, run_study

    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(locked, work)
    viewer = None
    polls = [0]
    poller: subprocess.Popen[str] | None = None
    if poll_s is not None:
        viewer = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from ledger.cli import main; main()",
                "view",
                str(work),
                "--port",
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert viewer.stdout is not None
        found = re.search(r"http://[\d.]+:\d+", viewer.stdout.readline())
        if not found:
            viewer.kill()
            raise RuntimeError("ledger view did not start")
        url = found.group(0)
        import httpx

        with httpx.Client(base_url=url, timeout=60) as http:  # its start-up check first
            while http.get("/api/status").json()["verification"]["state"] == "running":
                time.sleep(0.1)
        # the poller is a process of its own, as a browser is: never on the runner's GIL
        poller = subprocess.Popen(
            [sys.executable, "-c", POLLER, url, str(poll_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert poller.stdout is not None
        if poller.stdout.readline().strip() != "polling":  # its first poll is answered
            raise RuntimeError("the poller did not start")
    key = SigningKey.load(locked.parent / "owner.key")
    options = RunOptions(concurrency=conc, jitter_seed=1)
    try:
        start = time.perf_counter()
        result = run_study(work, key, AnthropicBackend(api_key="test", base_url=base_url), options)
        elapsed = time.perf_counter() - start
    finally:
        if poller is not None:
            out, _ = poller.communicate("stop\n", timeout=60)
            polls[0] = int(out.split()[-1]) if out.split() else 0
        if viewer is not None:
            viewer.terminate()
            viewer.communicate(timeout=30)
    if result.fatal or result.counters.given_up or not result.counters.responded:
        raise RuntimeError(f"the run did not answer every trial cleanly: {result}")
    if poll_s is not None and polls[0] == 0:
        raise RuntimeError("the viewer was never polled during the run")
    return result.counters.responded / elapsed


def runner_watched(trials: int, rounds: int) -> None:
    """bench_runner's quick configuration with and without a viewer polling the study."""
    from bench_runner import fake_server, locked_study

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PROMPT_LEDGER_HOME"] = str(Path(tmp) / "home")
        locked = locked_study(Path(tmp) / "locked" / "study", trials)
        work = Path(tmp) / "run" / "study"
        print(
            f"\nrun throughput with a viewer polling (fake server 0 ms, {trials}-trial "
            f"schedule, {rounds} alternating rounds each, medians)"
        )
        print(f"  {'conc':>4} {'poll s':>6} {'alone/s':>9} {'watched/s':>9} {'ratio':>6}")
        with fake_server(0) as base_url:
            _run_once(base_url, locked, work, 8, None)  # warm up
            for conc in (1, 8):
                for poll_s in POLLS:
                    alone, watched = [], []
                    for _ in range(rounds):
                        alone.append(_run_once(base_url, locked, work, conc, None))
                        watched.append(_run_once(base_url, locked, work, conc, poll_s))
                    a, w = statistics.median(alone), statistics.median(watched)
                    print(f"  {conc:>4} {poll_s:6.1f} {a:9.1f} {w:9.1f} {w / a:6.2f}")


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, build, measure each size in a fresh process, print."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--cache", type=Path, default=None, help="where archives are kept")
    parser.add_argument("--runner", action="store_true", help="also time a run with a viewer")
    parser.add_argument("--runner-trials", type=int, default=140)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2,000 trials; 35-trial runs")
    parser.add_argument("--measure", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure is not None:  # the child: one archive, one process
        print(json.dumps(measure(args.measure)))
        return 0
    if args.quick:
        args.trials, args.runner_trials, args.rounds = [2_000], 35, 1
    cache = args.cache or Path(tempfile.gettempdir()) / "prompt-ledger-bench-view"
    cache.mkdir(parents=True, exist_ok=True)
    base = base_archive(cache)
    rows = []
    for trials in args.trials:
        target = cache / f"archive-{trials}"
        if not (cache / f"archive-{trials}.done").exists():
            grow(base, target, trials)
            (cache / f"archive-{trials}.done").write_text("ok\n")
        child = subprocess.run(
            [sys.executable, __file__, "--measure", str(target)],
            capture_output=True,
            text=True,
            check=False,
        )
        if child.returncode != 0:
            print(child.stdout + child.stderr, file=sys.stderr)
            return 1
        rows.append(json.loads(child.stdout.splitlines()[-1]))
    pages_report(rows)
    if args.runner or args.quick:
        runner_watched(args.runner_trials, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
