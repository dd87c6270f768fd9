"""Write the hostile golden tapes: crafted exports that must never run code.

Run from the repository root: ``python -m tests.tapes.hostile.make_hostile``.
Each file is ``tests/tapes/linear.jsonl`` (a genuine recording) with one
value or recorded error replaced by an envelope that names a callable, and
its blob hashes recomputed so that only the name check can refuse it. Had a
decoder imported and called what they name, each would create the file
``pwned-by-tape`` in the working directory (the tests run in ``tmp_path``).

* ``*.must_refuse.jsonl``: name something that is not a data class
  (``os:system``, ``subprocess:Popen``, ``builtins:eval``): import refuses
  them with ``TapeFormatError``.
* ``*.as_data.jsonl``: name classes of a module that is not imported
  (``gt_hostile_payload``, which the test puts on ``sys.path`` with code
  that creates the file at import): import accepts them, and replay gives
  plain data and a ``RecordedError`` with a warning, importing nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graphtape import serde

HERE = Path(__file__).parent
SOURCE = HERE.parent / "linear.jsonl"
MARKER = "pwned-by-tape"


def _load() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SOURCE.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write(name: str, records: list[dict[str, Any]]) -> None:
    text = "\n".join(json.dumps(r, sort_keys=True, separators=(",", ":"), ensure_ascii=False) for r in records)
    (HERE / name).write_text(text + "\n", encoding="utf-8")


def _replace_value(
    records: list[dict[str, Any]], match: Callable[[dict[str, Any]], bool], key: str, envelope: dict[str, Any]
) -> list[dict[str, Any]]:
    """Point the value ``key`` of the first matching event at a new blob holding ``envelope``."""
    text = json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)
    h = serde.digest(text.encode("utf-8"))
    out, done = [], False
    for r in records:
        if not done and r.get("type") == "event" and match(r):
            r = {**r, "data": {**r["data"], key: h}}
            done = True
        out.append(r)
    assert done, "no event matched"
    return [*out, {"type": "blob", "hash": h, "text": text}]


def _replace_error(
    records: list[dict[str, Any]], match: Callable[[dict[str, Any]], bool], error: dict[str, Any]
) -> list[dict[str, Any]]:
    out, done = [], False
    for r in records:
        if not done and r.get("type") == "event" and match(r):
            data = {k: v for k, v in r["data"].items() if k != "response"}
            r = {**r, "data": {**data, "error": error}}
            done = True
        out.append(r)
    assert done, "no event matched"
    return out


def _tool(r: dict[str, Any]) -> bool:
    return r["kind"] == "tool_call"


def _mail(r: dict[str, Any]) -> bool:
    return r["kind"] == "effect_call" and r["data"].get("name") == "send_mail"


def main() -> None:
    touch = {"t": "json", "v": f"touch {MARKER}"}
    _write(
        "os_system.must_refuse.jsonl",
        _replace_value(_load(), _tool, "response", {"t": "enum", "c": "os:system", "v": touch}),
    )
    _write(
        "subprocess_popen.must_refuse.jsonl",
        _replace_value(
            _load(),
            lambda r: r["kind"] == "run_started",
            "input",
            {"t": "dataclass", "c": "subprocess:Popen", "v": {"args": {"t": "json", "v": ["touch", MARKER]}}},
        ),
    )
    _write(
        "builtins_eval.must_refuse.jsonl",
        _replace_error(
            _load(),
            _mail,
            {
                "type": "builtins:eval",
                "message": f"__import__('os').system('touch {MARKER}')",
                "detail": json.dumps({"args": [{"t": "json", "v": f"__import__('os').system('touch {MARKER}')"}]}),
            },
        ),
    )
    records = _replace_value(
        _load(), _tool, "response", {"t": "pydantic", "c": "gt_hostile_payload:Order", "v": {"order": "A-1"}}
    )
    _write(
        "unknown_module.as_data.jsonl",
        _replace_error(
            records,
            _mail,
            {
                "type": "gt_hostile_payload:Boom",
                "message": "boom",
                "detail": json.dumps(
                    {"attrs": {"why": {"t": "enum", "c": "gt_hostile_payload:Why", "v": {"t": "json", "v": "x"}}}}
                ),
            },
        ),
    )


if __name__ == "__main__":
    main()
