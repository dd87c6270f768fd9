"""CLI commands for tapes kept as tests: ``graphtape test`` and ``graphtape tapes prune``.

``graphtape test`` is graphtape's answer to Temporal's replayer in CI:
every recorded run in a directory of tapes (exports from production,
cassettes of the test suite) or in a store is replayed strictly against the
current code, and the build fails on the first run the code no longer
reproduces. Tapes are replayed in a thread pool, each in a temporary store
of its own (:mod:`graphtape.testing.tapefiles`): threads rather than
processes because the graph is then loaded once, and a replay spends its
time in Python code that holds no lock for long.

Registered on the app of :mod:`graphtape.cli.base` when imported (``graphtape.cli.app`` imports it).
"""

from __future__ import annotations

import contextlib
import enum
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import typer
from rich.text import Text

from graphtape.cli.base import (
    EXIT_BAD_RESULT,
    CliError,
    app,
    echo_json,
    handle_errors,
    open_tape,
    progress_bar,
    stderr,
    stdout,
)


class ReplayCheckMode(enum.StrEnum):
    strict = "strict"
    flight = "flight"


_STYLES = {"passed": "green", "re-recorded": "cyan", "diverged": "red", "errored": "red"}


def _tape_sources(ctx: typer.Context, source: str, workdir: Path, mode: str) -> tuple[list[Path], Path]:
    """The tape files to check, and the directory their names are shown relative to.

    A store URL is exported thread by thread into ``workdir`` first: a
    replay writes runs, and the store under test must not change.
    """
    from graphtape.testing.tapefiles import tape_files

    if "://" in source:
        if mode == "flight":
            raise CliError(
                "--mode flight rewrites tape files; export the runs first (graphtape export) "
                "or give a directory of tapes"
            )
        files = []
        with open_tape(ctx, url=source) as tape:
            threads: list[str] = []
            for run in tape.store.list_runs(limit=None, newest_first=False):
                if run.replay_of is None and run.thread_id not in threads:
                    threads.append(run.thread_id)
            for n, thread in enumerate(threads):
                target = workdir / f"thread-{n:04d}-{_safe(thread)}.jsonl"
                tape.export_thread(thread, target)
                files.append(target)
        if not files:
            raise CliError(f"no recorded runs in {source}")
        return files, workdir
    root = Path(source)
    if not root.exists():
        raise CliError(f"{source} is neither a directory, a tape file nor a store URL")
    files = tape_files(root)
    if not files:
        raise CliError(f"no tape files (*.jsonl with a graphtape header) under {source}")
    return files, root if root.is_dir() else root.parent


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:60]


def _display(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


@app.command("test")
def test_cmd(
    ctx: typer.Context,
    source: str = typer.Argument(
        ...,
        metavar="PATH",
        show_default=False,
        help="A directory of tape files (searched recursively), one tape file, or a store URL.",
    ),
    graph_spec: str = typer.Option(..., "--graph", "-g", help="The current code: module:attr or path/to/file.py:attr"),
    mode: ReplayCheckMode = typer.Option(
        ReplayCheckMode.strict,
        "--mode",
        "-m",
        help="strict: every call must be served (CI); flight: run changed calls live and rewrite "
        "the tapes that changed.",
    ),
    jobs: int = typer.Option(
        min(4, os.cpu_count() or 1), "--jobs", "-j", min=1, help="Tapes replayed at the same time."
    ),
    junit_xml: Path | None = typer.Option(
        None,
        "--junit-xml",
        help="Also write the results as JUnit XML (for CI test reports).",
        show_default=False,
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Replay every recorded run in PATH strictly against the current code (exit 1 if any diverged or failed)."""
    from graphtape.testing.tapefiles import check_file

    with handle_errors(), tempfile.TemporaryDirectory(prefix="graphtape-test-") as tmp:
        from graphtape.loading import load_graph

        files, base = _tape_sources(ctx, source, Path(tmp), mode.value)
        graph = load_graph(graph_spec)
        outcomes = []
        with progress_bar(stderr()) as progress:
            task = progress.add_task("replaying tapes", total=len(files))
            with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="graphtape-test") as pool:
                futures = [pool.submit(check_file, f, graph, mode=mode.value) for f in files]
                for future in as_completed(futures):
                    outcomes.append(future.result())
                    progress.advance(task)
        outcomes.sort(key=lambda o: str(o.path))
        if junit_xml is not None:
            _write_junit(junit_xml, outcomes, base)
    failed = [o for o in outcomes if o.status in ("diverged", "errored")]
    if as_json:
        echo_json(
            [
                {
                    "tape": _display(o.path, base),
                    "status": o.status,
                    "runs": o.runs,
                    "seconds": round(o.seconds, 3),
                    "message": o.message,
                    "diff": o.diff,
                }
                for o in outcomes
            ]
        )
    else:
        _print_outcomes(outcomes, base)
    if failed:
        raise typer.Exit(EXIT_BAD_RESULT)


def _print_outcomes(outcomes: list[Any], base: Path) -> None:
    from rich import box
    from rich.table import Table

    console = stdout()
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1))
    table.add_column("tape", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("runs", justify="right", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    for o in outcomes:
        table.add_row(
            _display(o.path, base),
            Text(o.status, style=_STYLES.get(o.status, "")),
            str(o.runs),
            f"{o.seconds * 1000:.0f}ms",
        )
    console.print(table)
    for o in outcomes:
        if o.status in ("diverged", "errored"):
            console.print(Text(f"\n{o.status}: {_display(o.path, base)}", style="bold red"))
            console.print(o.message)
            if o.diff:
                console.print(o.diff)
    counts = {s: sum(1 for o in outcomes if o.status == s) for s in ("passed", "re-recorded", "diverged", "errored")}
    console.print("\n" + ", ".join(f"{n} {s}" for s, n in counts.items() if n or s == "passed"))


def _write_junit(path: Path, outcomes: list[Any], base: Path) -> None:
    """JUnit XML: one test case per tape file; a divergence is a failure (with the diff), a crash an error."""
    import xml.etree.ElementTree as ET

    suite = ET.Element(
        "testsuite",
        {
            "name": "graphtape",
            "tests": str(len(outcomes)),
            "failures": str(sum(1 for o in outcomes if o.status == "diverged")),
            "errors": str(sum(1 for o in outcomes if o.status == "errored")),
            "skipped": "0",
            "time": f"{sum(o.seconds for o in outcomes):.3f}",
        },
    )
    for o in outcomes:
        shown = _display(o.path, base)
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": "graphtape." + (str(Path(shown).parent).replace(os.sep, ".").strip(".") or "tapes"),
                "name": shown,
                "time": f"{o.seconds:.3f}",
            },
        )
        if o.status == "diverged":
            ET.SubElement(case, "failure", {"message": o.message, "type": "Divergence"}).text = o.diff or o.message
        elif o.status == "errored":
            ET.SubElement(case, "error", {"message": o.message, "type": "ReplayError"}).text = o.message
    root = ET.Element("testsuites")
    root.append(suite)
    tree = ET.ElementTree(root)
    ET.indent(tree)
    try:
        tree.write(path, encoding="utf-8", xml_declaration=True)
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}") from exc


# ---------------------------------------------------------------------------
# tapes prune
# ---------------------------------------------------------------------------

tapes_app = typer.Typer(help="Keep the cassettes of a test suite tidy.", no_args_is_help=True)
app.add_typer(tapes_app, name="tapes")


def used_cassettes(path: Path) -> set[Path]:
    """The cassette files of the graphtape tests pytest collects under ``path`` (absolute paths).

    Collection runs in a subprocess with this Python, the project's pytest
    configuration and graphtape's plugin, which lists the cassette of each
    collected test marked ``@pytest.mark.graphtape`` or using the
    ``graphtape_cassette`` fixture.
    """
    with tempfile.TemporaryDirectory(prefix="graphtape-prune-") as tmp:
        listing = Path(tmp) / "tapes.txt"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--graphtape-list-tapes={listing}",
            str(path),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode not in (0, 5) or not listing.exists():  # 5: no tests collected
            tail = " ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
            raise CliError(
                f"pytest could not collect the tests under {path} (exit {proc.returncode}); nothing was removed: {tail}"
            )
        return {Path(line) for line in listing.read_text(encoding="utf-8").splitlines() if line}


def cassette_files(path: Path) -> list[Path]:
    """Cassettes under ``path``: graphtape tape files at ``tapes/<module>/<test>.jsonl``."""
    from graphtape.testing.tapefiles import tape_files

    return [p for p in tape_files(path) if p.parent.parent.name == "tapes"]


@tapes_app.command("prune")
def prune_cmd(
    path: Path = typer.Argument(Path("tests"), help="The test directory (default: tests)."),
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="List what would be removed, remove nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the removed (or removable) tapes as JSON."),
) -> None:
    """Remove cassettes (tapes/<module>/<test>.jsonl) that no collected test uses any more."""
    with handle_errors():
        if not path.is_dir():
            raise CliError(f"{path} is not a directory")
        used = used_cassettes(path)
        unused = [p for p in cassette_files(path) if p.resolve() not in used]
        if not dry_run:
            for p in unused:
                p.unlink()
                with contextlib.suppress(OSError):
                    p.parent.rmdir()  # only when it is now empty
    if as_json:
        echo_json(
            {
                "removed": [] if dry_run else [str(p) for p in unused],
                "unused": [str(p) for p in unused],
                "kept": len(used),
            }
        )
        return
    console = stdout()
    verb = "would remove" if dry_run else "removed"
    for p in unused:
        console.print(f"{verb} {p}")
    console.print(f"{len(unused)} unused tape(s) {verb}; {len(used)} in use")
