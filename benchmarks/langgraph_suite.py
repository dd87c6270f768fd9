"""LangGraph's own test suite as graphtape's conformance harness: its saver, and recording with strict replay.

    python benchmarks/langgraph_suite.py [--mode saver|recorded|both] [--backend sqlite,postgresql,redis]
                                         [--files pregel,time_travel] [-k EXPR] [--report PATH] [--check]

(``make langgraph-suite ARGS="..."`` installs the ``conformance`` extra first.)

The ``tests/`` of the sdist of the INSTALLED langgraph are fetched from the package registry once
(``pip download --no-binary :all: --no-deps langgraph==<version>``) into
``~/.cache/graphtape/langgraph-suite/`` (``$GRAPHTAPE_LANGGRAPH_SUITE_CACHE``), kept between
runs; ``--no-download`` refuses to fetch. The files in :data:`FILES` that the sdist has are run,
unchanged, by pytest with ``benchmarks/langgraph_suite_plugin.py`` (see it for what each mode
does to them), with ``NO_DOCKER=true`` (LangGraph's own PostgreSQL and Redis fixtures expect
its docker compose; graphtape's stores use ``GRAPHTAPE_TEST_POSTGRES_URL`` and
``GRAPHTAPE_TEST_REDIS_URL``, as graphtape's suite does).

* ``saver``: every test that takes LangGraph's ``sync_checkpointer``/``async_checkpointer``
  runs with LangGraph's in-memory saver and with graphtape's saver on each backend; a test is
  unchanged when its outcome (passed, failed, skipped...) is the in-memory one's.
* ``recorded``: every test runs unrecorded, then with every graph it invokes recorded by
  graphtape (``Cassette.autorecording``); a test is unchanged when its outcome is the same.
  After each recorded test every run it recorded is replayed strictly against the same graph
  object; a run is **exact** when the replay has the recorded status, made no live call, did
  not diverge and ended in the same final state (``output_matches``; a failed run: failed
  again with an error of the same type).

Prints the figures, and writes a JSON report (``--report``) with every test whose outcome
changed and every run not replayed exactly, each with a short cause signature
(:func:`signature`), grouped; and the exclusions of :data:`NONDETERMINISTIC` with their
reasons. ``--check`` exits 1 unless every test is unchanged and every run not excluded is exact.
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from langgraph_suite_plugin import GRAPHTAPE_PREFIX, scrub  # noqa: E402

#: LangGraph's test files the harness runs (those the sdist has)
FILES = (
    "test_pregel",
    "test_pregel_async",
    "test_interrupt_state",
    "test_interruption",
    "test_time_travel",
    "test_time_travel_async",
    "test_strict_resume",
    "test_subgraph_persistence",
    "test_subgraph_persistence_async",
    "test_large_cases",
    "test_large_cases_async",
)
BACKENDS = ("sqlite", "postgresql", "redis")
#: what LangGraph's conftest files import besides what graphtape's test extra installs
#: (module -> the package of the ``conformance`` extra that provides it)
TEST_MODULES = {
    "syrupy": "syrupy",
    "pytest_mock": "pytest-mock",
    "Crypto": "pycryptodome",
    "langgraph.checkpoint.postgres": "langgraph-checkpoint-postgres",
}

#: Tests whose runs cannot replay exactly by design: a node reads something the tape does not hold
#: (a counter of the test, a mock's call count), so a strict replay must report a divergence for
#: them, never call them exact. Test function name -> reason. Their runs are counted apart; one
#: that replays exact is listed for review (``exact_despite_exclusion``).
_COUNTER = "a node's output depends on a counter of the test ({}), which the replay advances again"
NONDETERMINISTIC: dict[str, str] = {
    # test_subgraph_persistence(_async): call_inner picks its topic from a count of its own calls
    **{
        name + suffix: _COUNTER.format("call_count picks the topic")
        for name in (
            "test_stateless_state_resets",
            "test_stateless_state_resets_with_interrupt",
            "test_checkpointer_false_no_persistence",
            "test_stateful_namespace_isolation",
        )
        for suffix in ("", "_async")
    },
    **{
        name + suffix: _COUNTER.format("topics[len(subgraph_messages)]")
        for name in (
            "test_stateful_state_accumulates",
            "test_stateful_state_accumulates_with_interrupt",
            "test_stateful_interrupt_resume",
        )
        for suffix in ("", "_async")
    },
    # test_time_travel(_async): the re-run node writes f"b{call_count}" / f"sub{sub_call_count}"
    "test_replay_creates_branch_preserving_old_checkpoints": _COUNTER.format("node_b writes b<call_count>"),
    "test_fork_creates_branch_preserving_old_checkpoints": _COUNTER.format("node_b writes b<call_count>"),
    "test_replay_creates_branch_in_subgraph": _COUNTER.format("sub_step writes sub<sub_call_count>"),
    "test_fork_creates_branch_in_subgraph": _COUNTER.format("sub_step writes sub<sub_call_count>"),
    # test_pregel
    "test_delta_channel_time_travel": _COUNTER.format("respond answers ai-<counter>"),
    "test_stream_messages_dedupe_state": _COUNTER.format("call_model emits to_emit.pop(0)"),
    # test_large_cases(_async): the node's update depends on how often it ran (self.ticks)
    "test_send_dedupe_on_resume": _COUNTER.format("the node's update depends on self.ticks"),
}

DEFAULT_CACHE = Path.home() / ".cache" / "graphtape" / "langgraph-suite"
_PARAM = re.compile(rf"(?<=[\[-]){GRAPHTAPE_PREFIX}(sqlite|postgresql|redis)(?=[-\]])")


class HarnessError(Exception):
    """Something the harness needs is missing; the message says what to do."""


# -- the sdist ------------------------------------------------------------------------------------


def cache_root() -> Path:
    return Path(os.environ.get("GRAPHTAPE_LANGGRAPH_SUITE_CACHE") or DEFAULT_CACHE)


def suite_dir(version: str) -> Path:
    """Where the ``tests/`` of langgraph ``version`` are extracted (a pytest rootdir of its own)."""
    return cache_root() / f"langgraph-{version}"


def ensure_suite(version: str, *, download: bool = True) -> Path:
    """The extracted test suite of langgraph ``version``, fetched and extracted when missing."""
    root = suite_dir(version)
    if (root / "tests" / "conftest.py").is_file():
        return root
    cache = cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"langgraph-{version}.tar.gz"
    if not archive.is_file():
        if not download:
            raise HarnessError(
                f"LangGraph {version}'s tests are not in {cache}: run without --no-download to fetch its sdist"
            )
        print(f"fetching the sdist of langgraph {version} into {cache}", flush=True)
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps", "-d", str(cache)]
        done = subprocess.run(
            [*pip, f"langgraph=={version}"],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 or not archive.is_file():
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise HarnessError(f"could not download the sdist of langgraph {version}: {last[0]}")
    staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=cache))
    try:
        with tarfile.open(archive) as tar:
            members = []
            for member in tar.getmembers():
                parts = Path(member.name).parts
                if len(parts) > 2 and parts[1] == "tests":
                    member.name = str(Path(*parts[1:]))
                    members.append(member)
            tar.extractall(staging, members=members, filter="data")
        # the sdist's own pytest settings (--snapshot-warn-unused, --durations) are not wanted here;
        # its tests need only the rootdir
        (staging / "pytest.ini").write_text(
            "[pytest]\naddopts = --strict-markers -p no:cacheprovider\nasyncio_default_fixture_loop_scope = function\n",
            encoding="utf-8",
        )
        if root.exists():
            shutil.rmtree(root)
        staging.rename(root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root


def check_test_modules() -> None:
    missing = [pkg for mod, pkg in TEST_MODULES.items() if _find(mod) is None]
    if missing:
        raise HarnessError(
            f"LangGraph's tests need {', '.join(missing)}: "
            "pip install -e '.[test,conformance]' (or make langgraph-suite)"
        )


def _find(module: str) -> Any:
    try:
        return importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return None


def select_files(root: Path, wanted: list[str] | None) -> list[str]:
    names = list(FILES)
    if wanted:
        norm = [w if w.startswith("test_") else f"test_{w}" for w in wanted]
        unknown = [w for w in norm if w not in FILES]
        if unknown:
            raise HarnessError(f"unknown test file {unknown[0]!r}; use some of: {', '.join(FILES)}")
        names = norm
    present = [f"tests/{n}.py" for n in names if (root / "tests" / f"{n}.py").is_file()]
    if not present:
        raise HarnessError(f"none of {', '.join(names)} is in {root / 'tests'}")
    return present


# -- running pytest -------------------------------------------------------------------------------


def run_session(
    root: Path, files: list[str], mode: str, backends: list[str], k: str | None, log: Path, timeout: int
) -> tuple[list[dict[str, Any]], float, str]:
    """One pytest session on LangGraph's files: (a row per test, seconds, pytest's closing line)."""
    with tempfile.TemporaryDirectory(prefix="gt-lgs-") as tmp:
        out = Path(tmp) / "rows.jsonl"
        # full assertion diffs (not the run summary's verbosity): a failure's cause may be past the cut
        cmd = [sys.executable, "-m", "pytest", *files, "-q", "-o", "verbosity_assertions=2"]
        cmd += ["-p", "langgraph_suite_plugin"]
        cmd += ["--lgs-mode", mode, "--lgs-backends", ",".join(backends), "--lgs-out", str(out)]
        if _find("pytest_timeout") is not None:
            cmd += ["-o", f"timeout={timeout}"]
        if k:
            cmd += ["-k", k]
        paths = [str(HERE), str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "NO_DOCKER": "true", "PYTHONPATH": os.pathsep.join(paths)}
        started = time.perf_counter()
        with log.with_suffix(".log").open("w", encoding="utf-8") as fh:
            done = subprocess.run(cmd, cwd=root, env=env, stdout=fh, stderr=subprocess.STDOUT)
        seconds = time.perf_counter() - started
        text = log.with_suffix(".log").read_text(encoding="utf-8", errors="replace")
        closing = next((ln for ln in reversed(text.splitlines()) if re.search(r"\d+ (passed|failed|error)", ln)), "")
        if done.returncode not in (0, 1) or not out.is_file():
            raise HarnessError(f"pytest ({mode}) exited {done.returncode}: see {log.with_suffix('.log')}")
        shutil.copyfile(out, log.with_suffix(".jsonl"))
    return read_rows(log.with_suffix(".jsonl")), seconds, closing.strip("= ")


def previous_session(report_path: Path, mode: str) -> tuple[float, str]:
    """(seconds, pytest's closing line) of session ``mode`` as the last report gave them."""
    try:
        old = json.loads(report_path.read_text(encoding="utf-8"))
        return float(old["seconds"][mode]), str(old["sessions"][mode])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0, "rows of the previous session"


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


# -- comparing ------------------------------------------------------------------------------------


def base_id(nodeid: str) -> tuple[str, str | None]:
    """(the test id with graphtape's checkpointer parameter put back to ``memory``, that backend)."""
    found = _PARAM.search(nodeid)
    if found is None:
        return nodeid, None
    return nodeid[: found.start()] + "memory" + nodeid[found.end() :], found.group(1)


def test_name(nodeid: str) -> str:
    return nodeid.split("::")[-1].split("[")[0]


def outcome_change(nodeid: str, before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    message = after.get("message") or before.get("message") or ""
    sig = f"{before['outcome']} -> {after['outcome']}: "
    # an assertion whose values differ by graphtape's run link (and in many ways besides, by test)
    if after.get("mentions_run_id") and message.lstrip().startswith(("AssertionError", "assert")):
        sig += f"graphtape_run_id in a compared value ({message.split(':')[0].split()[0] if message else '?'})"
    else:
        sig += scrub(message)[:100] + (" [graphtape's code on the stack]" if after.get("graphtape_frames") else "")
    return {
        "test": nodeid,
        "unrecorded": before["outcome"],
        "now": after["outcome"],
        "message": message,
        "signature": sig,
    }


def compare_saver(rows: list[dict[str, Any]], backends: list[str]) -> dict[str, Any]:
    stock = {r["nodeid"]: r for r in rows if base_id(r["nodeid"])[1] is None}
    per: dict[str, dict[str, Any]] = {}
    for backend in backends:
        mine = [(base_id(r["nodeid"])[0], r) for r in rows if base_id(r["nodeid"])[1] == backend]
        differ = [
            outcome_change(row["nodeid"], stock[bid], row)
            for bid, row in mine
            if bid in stock and stock[bid]["outcome"] != row["outcome"]
        ]
        unmatched = [row["nodeid"] for bid, row in mine if bid not in stock]
        per[backend] = {
            "tests": len(mine),
            "unchanged": len(mine) - len(differ) - len(unmatched),
            "passed": sum(1 for _, row in mine if row["outcome"] == "passed"),
            "stock_passed": sum(1 for bid, _ in mine if stock.get(bid, {}).get("outcome") == "passed"),
            "differ": differ,
            "unmatched": unmatched,
        }
    return per


def signature(run: dict[str, Any]) -> str:
    """A short, id-free cause of a run not replayed exactly, to group them by."""
    if run.get("replayed_status") == "raised":
        return f"replay raised {scrub(run.get('replay_error') or '')[:90]}"
    div = run.get("divergence")
    if div:
        return f"diverged ({div.get('kind')}): {scrub(div.get('reason') or '')[:120]}"
    rec, rep = run.get("recorded_status"), run.get("replayed_status")
    if rec != rep:
        error = run.get("replay_error")
        return f"status {rec} -> {rep}" + (f": {scrub(error)[:90]}" if error else "")
    if run.get("live"):
        return "live calls in a strict replay"
    if rec == "failed":
        return f"failed with another error: {scrub(run.get('replay_error') or '')[:90]}"
    if run.get("output_matches") is False:
        return f"final state differs ({rec})"
    sides = [side for side in ("recorded", "replayed") if run.get(f"{side}_output") is False]
    return f"final state not compared ({rec}; no output view on the {' and '.join(sides) or '?'} run)"


def compare_recorded(baseline: list[dict[str, Any]], recorded: list[dict[str, Any]]) -> dict[str, Any]:
    before = {r["nodeid"]: r for r in baseline if base_id(r["nodeid"])[1] is None}
    changed = []
    runs = exact = 0
    non_exact: list[dict[str, Any]] = []
    excluded: dict[str, dict[str, Any]] = {}
    for row in recorded:
        nodeid = row["nodeid"]
        prior = before.get(nodeid)
        if prior is not None and prior["outcome"] != row["outcome"]:
            changed.append(outcome_change(nodeid, prior, row))
        name = test_name(nodeid)
        for run in row.get("runs", []):
            if name in NONDETERMINISTIC:
                entry = excluded.setdefault(
                    name, {"test": name, "reason": NONDETERMINISTIC[name], "runs": 0, "replayed": {}, "exact": []}
                )
                entry["runs"] += 1
                # how graphtape reported it: a divergence, or the replayed code failing on its own
                said = "diverged" if run.get("divergence") else str(run.get("replayed_status"))
                entry["replayed"][said] = entry["replayed"].get(said, 0) + 1
                if run.get("exact"):
                    entry["exact"].append(f"{nodeid} {run['run_id']}")
                continue
            runs += 1
            if run.get("exact"):
                exact += 1
                continue
            div = run.get("divergence") or {}
            non_exact.append(
                {
                    "test": nodeid,
                    "graph": run.get("graph"),
                    "api": run.get("api"),
                    "run_id": run.get("run_id"),
                    "recorded_status": run.get("recorded_status"),
                    "replayed_status": run.get("replayed_status"),
                    "live": run.get("live"),
                    "output_matches": run.get("output_matches"),
                    "divergence_kind": div.get("kind"),
                    "divergence_message": div.get("message"),
                    "recorded_error": run.get("recorded_error"),
                    "replay_error": run.get("replay_error"),
                    "signature": signature(run),
                }
            )
    return {
        "tests": len(recorded),
        "compared": sum(1 for r in recorded if r["nodeid"] in before),
        "unchanged": sum(1 for r in recorded if r["nodeid"] in before) - len(changed),
        "changed": changed,
        "runs": runs,
        "exact": exact,
        "non_exact": non_exact,
        "run_groups": groups(non_exact),
        "test_groups": groups(changed),
        "excluded": list(excluded.values()),
        "exact_despite_exclusion": [e for entry in excluded.values() for e in entry["exact"]],
    }


def groups(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items by cause signature, largest group first, each with one example test and the files it hits."""
    by: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for item in items:
        by[item["signature"]].append(item)
    out = []
    for sig, members in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        files = collections.Counter(m["test"].split("::")[0].removeprefix("tests/") for m in members)
        out.append({"signature": sig, "count": len(members), "example": members[0]["test"], "files": dict(files)})
    return out


# -- output ---------------------------------------------------------------------------------------


def print_groups(title: str, items: list[dict[str, Any]], limit: int) -> None:
    if not items:
        return
    print(f"  {title}:")
    for group in items[:limit]:
        print(f"    {group['count']:5}  {group['signature']}")
        print(f"           e.g. {group['example']}")
    if len(items) > limit:
        rest = sum(g["count"] for g in items[limit:])
        print(f"    {rest:5}  in {len(items) - limit} more groups (see the report)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("saver", "recorded", "both"), default="both")
    parser.add_argument("--backend", default=",".join(BACKENDS), help="saver mode: comma-separated backends")
    parser.add_argument("--files", default=None, help=f"comma-separated subset of: {', '.join(FILES)}")
    parser.add_argument("-k", dest="k", default=None, help="pytest -k expression, passed through")
    parser.add_argument("--report", type=Path, default=None, help="the JSON report (default: in the cache folder)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds a test (with its replays) may take")
    parser.add_argument("--no-download", action="store_true", help="fail instead of fetching the sdist")
    parser.add_argument("--check", action="store_true", help="exit 1 unless every figure is complete")
    parser.add_argument(
        "--reuse", action="store_true", help="compare the rows the last run with this --report kept, run nothing"
    )
    parser.add_argument("--groups", type=int, default=25, help="cause groups printed per figure")
    args = parser.parse_args(argv)
    try:
        backends = [b.strip() for b in args.backend.split(",") if b.strip()]
        bad = [b for b in backends if b not in BACKENDS]
        if bad or not backends:
            raise HarnessError(f"unknown backend {bad[0] if bad else '(none)'!r}; use some of {', '.join(BACKENDS)}")
        version = importlib.metadata.version("langgraph")
        root = ensure_suite(version, download=not args.no_download)
        check_test_modules()
        files = select_files(root, args.files.split(",") if args.files else None)
        report_path = args.report or cache_root() / f"report-{version}.json"
        report_path.parent.mkdir(parents=True, exist_ok=True)
        log = report_path.with_suffix("")
        report: dict[str, Any] = {
            "langgraph": version,
            "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
            "files": files,
            "k": args.k,
            "seconds": {},
            "sessions": {},
            "exclusions": [{"test": t, "reason": r} for t, r in NONDETERMINISTIC.items()],
        }
        sessions: dict[str, list[dict[str, Any]]] = {}
        plan = []
        if args.mode in ("saver", "both"):
            plan.append(("saver", backends))
        elif args.mode == "recorded":
            plan.append(("stock", []))
        if args.mode in ("recorded", "both"):
            plan.append(("recorded", []))
        for mode, bks in plan:
            print(f"running LangGraph {version}'s tests ({mode}{': ' + ','.join(bks) if bks else ''})", flush=True)
            kept = Path(f"{log}.{mode}.jsonl")
            if args.reuse and kept.is_file():  # the rows of the last session, compared again
                rows, seconds, closing = read_rows(kept), *previous_session(report_path, mode)
            else:
                rows, seconds, closing = run_session(
                    root, files, mode, bks, args.k, Path(f"{log}.{mode}.rows"), args.timeout
                )
            sessions[mode] = rows
            report["seconds"][mode] = round(seconds, 1)
            report["sessions"][mode] = closing
            print(f"  {closing} in {seconds:.0f} s", flush=True)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    complete = True
    print(f"\nLangGraph {version}: {', '.join(Path(f).stem for f in files)}" + (f" (-k {args.k})" if args.k else ""))
    if "saver" in sessions:
        per = report["saver"] = compare_saver(sessions["saver"], backends)
        for backend, fig in per.items():
            print(
                f"  saver on {backend}: {fig['unchanged']}/{fig['tests']} checkpointer tests unchanged "
                f"({fig['passed']} passed; in-memory saver: {fig['stock_passed']})"
            )
            complete &= fig["unchanged"] == fig["tests"]
            print_groups(f"changed on {backend}", groups(fig["differ"]), args.groups)
    if "recorded" in sessions:
        baseline = sessions.get("saver") or sessions["stock"]
        rec = report["recorded"] = compare_recorded(baseline, sessions["recorded"])
        print(f"  recorded: {rec['unchanged']}/{rec['compared']} tests unchanged")
        print(f"  replayed: {rec['exact']}/{rec['runs']} recorded runs exact")
        excluded_runs = sum(e["runs"] for e in rec["excluded"])
        if excluded_runs:
            said: collections.Counter[str] = collections.Counter()
            for entry in rec["excluded"]:
                said.update(entry["replayed"])
            print(
                f"  excluded: {excluded_runs} runs of {len(rec['excluded'])} nondeterministic tests, replayed "
                + ", ".join(f"{n} {what}" for what, n in said.most_common())
            )
        if rec["exact_despite_exclusion"]:
            print(f"  exact despite exclusion (review): {len(rec['exact_despite_exclusion'])} runs")
        complete &= rec["unchanged"] == rec["compared"] and rec["exact"] == rec["runs"]
        print_groups("tests changed under recording", rec["test_groups"], args.groups)
        print_groups("runs not replayed exactly", rec["run_groups"], args.groups)
    report_path.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"report: {report_path}")
    return 1 if args.check and not complete else 0


if __name__ == "__main__":
    sys.exit(main())
