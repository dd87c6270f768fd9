"""A call's identity: where it was made, what it asked, and how it is found again on a tape.

Both sides import this module: ``record/`` names each LLM, tool and effect
call it captures with a :class:`CallSite` and a request fingerprint, and
``replay/`` finds the :class:`RecordedCall` that answers it by the same
:func:`match_key`. Neither side imports the other.

A site is the node path with task ids removed (``sub/sub_llm``), the branch
(``Send`` index of every enclosing task), the step and the call's ordinal
within its task. Task and checkpoint ids are *not* part of the match:
LangGraph regenerates them on every execution.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from graphtape import events, serde

if TYPE_CHECKING:
    from graphtape.store.base import EventRow, TapeStore

#: Put by graphtape's ``BaseChatModel.batch``/``abatch`` wrapper into each input's config metadata:
#: the input's index, so a batch's calls are matched by slot, not by the order their threads started.
BATCH_SLOT_KEY = "graphtape_batch_slot"

#: The kinds of call graphtape captures, and the event kind each is recorded as (``llm_call``, ...).
KINDS = events.CALL_KINDS
CALL_KINDS = events.CALL_EVENT_KINDS
#: a call event's kind -> its call's kind (``llm_call`` -> ``llm``)
_CALL_KIND_OF = dict(zip(CALL_KINDS, KINDS))

_UUIDISH = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def fingerprint(request: Any) -> str:
    """The digest a request is matched by: of its *canonical* JSON, so key order never matters.

    A chat request (``{"messages": [message keys], "request": {...}}``) is
    hashed by :func:`chat_fingerprint`, which gives the same digest.
    """
    if type(request) is dict and len(request) == 2:
        keys = request.get("messages")
        if type(keys) is list and "request" in request:
            return chat_fingerprint(keys, serde.canonical_json(request["request"]))
    return serde.digest(serde.canonical_json(request))


#: message lists at least this long are hashed from a remembered prefix (shorter ones: not worth it)
_PREFIX_MIN = 16
#: first message key -> (the last key list hashed with it first, the hash state after those keys); at most
#: _PREFIXES_MAX lists (a conversation each)
_PREFIXES: dict[str, tuple[list[str], Any]] = {}
_PREFIXES_MAX = 1024
#: a message key as fingerprints hold them (a digest): written in JSON as is, between quotes
_PLAIN_KEY = re.compile(r"[0-9a-f]+")


def chat_fingerprint(keys: list[Any], request_json: str) -> str:
    """``fingerprint({"messages": keys, "request": R})`` given ``request_json``, R's canonical JSON.

    The canonical JSON of that two-key dict is ``{"messages":`` + the
    keys' + ``,"request":`` + R's + ``}`` (sorted keys, no spaces), so a
    caller that keeps R's canonical JSON (a model's parameters, the same
    on every call: see ``graphtape.record.llm``) does not serialise it
    again. A long list is hashed from a remembered prefix
    (:func:`_chat_fingerprint`).
    """
    if len(keys) >= _PREFIX_MIN:
        return _chat_fingerprint(keys, request_json)
    return serde.digest('{"messages":' + serde.canonical_json(keys) + ',"request":' + request_json + "}")


def _chat_fingerprint(keys: list[Any], request_json: str) -> str:
    """``digest('{"messages":' + canonical_json(keys) + ',"request":' + request_json + '}')``, from a prefix.

    A conversation's request is the previous request's messages plus the
    new ones: the canonical JSON begins with the same text, and the hash
    state after it (``blake2b.copy``) is reused. The prefix is compared key
    by key (a list comparison in C), so a different list never reuses a
    state; a key that is not a plain digest falls back to the full JSON.
    """
    import hashlib

    known = _PREFIXES.get(keys[0]) if type(keys[0]) is str else None
    start, state = 0, None
    if known is not None:
        prefix, saved = known
        n = len(prefix)
        if n <= len(keys) and keys[:n] == prefix:
            start, state = n, saved.copy()
    new = keys[start:]
    if not all(type(k) is str and _PLAIN_KEY.fullmatch(k) for k in new):
        return serde.digest('{"messages":' + serde.canonical_json(keys) + ',"request":' + request_json + "}")
    if state is None:
        state = hashlib.blake2b(b'{"messages":["' + keys[0].encode() + b'"', digest_size=16)
        new = new[1:]
    if new:
        state.update(("," + ",".join(f'"{k}"' for k in new)).encode())
    if start < len(keys):
        if len(_PREFIXES) >= _PREFIXES_MAX:
            _PREFIXES.clear()
        _PREFIXES[keys[0]] = (list(keys), state.copy())
    state.update(("]," + '"request":' + request_json + "}").encode())
    return state.hexdigest()


def match_key(kind: str, node_path: str, fingerprint: str) -> tuple[str, str, str]:
    """What must be equal for a recorded call to answer a new one: a changed request is never served."""
    return (kind, node_path, fingerprint)


def normalise_path(path: Any) -> Any:
    """LangGraph's task path without ids and objects, e.g. ``["__pregel_push", 2]``."""
    if isinstance(path, (list, tuple)):
        return [p for p in (normalise_path(x) for x in path) if p is not None]
    if isinstance(path, bool) or path is None:
        return None
    if isinstance(path, int):
        return path
    if isinstance(path, str):
        return None if _UUIDISH.match(path) else path
    return None


def branch_of(metadata: dict[str, Any]) -> str:
    """The branch of one task: its normalised ``langgraph_path`` as text (``__pregel_push,2``)."""
    path = metadata.get("langgraph_path") or []
    if type(path) is tuple:
        # LangGraph's paths are tuples of str and int, the same for a node on every step
        # (``("__pregel_pull", "node")``): worked out once per path, not once per call
        try:
            known = _BRANCHES.get(path)
        except TypeError:  # a path holding an object that cannot be a key (a functional API call's)
            known = None
        if known is not None:
            return known
    parts = normalise_path(path)
    branch = ",".join(str(p) for p in parts) if isinstance(parts, list) else ""
    if type(path) is tuple and all(type(p) is str or type(p) is int for p in path):
        if len(_BRANCHES) >= _BRANCHES_MAX:
            _BRANCHES.clear()
        _BRANCHES[path] = branch
    return branch


#: a task's ``langgraph_path`` (a flat tuple of str and int) -> its branch; at most _BRANCHES_MAX paths
_BRANCHES: dict[tuple[Any, ...], str] = {}
_BRANCHES_MAX = 4096


@dataclasses.dataclass(frozen=True)
class CallSite:
    """Where a call was made, in terms that survive re-execution."""

    kind: str  # "llm" | "tool" | "effect"
    node: str
    node_path: str
    branch: str
    step: int | None
    task: str  # full checkpoint namespace including task ids: unique per task execution
    ordinal: int

    def describe(self) -> str:
        where = self.node_path or "(outside any node)"
        step = f" step {self.step}" if self.step is not None else ""
        return f"{self.kind} call #{self.ordinal} in node {where}{step}"


_object_new = object.__new__


def _new_site(kind: str, node: str, node_path: str, branch: str, step: int | None, task: str, ordinal: int) -> CallSite:
    """``CallSite(kind, node, node_path, branch, step, task, ordinal)``: the same object, its fields set in
    one ``__dict__`` update instead of the frozen dataclass's ``object.__setattr__`` per field (0.62 against
    1.20 us; every call is named by a site, and the construction was half of naming it)."""
    site = _object_new(CallSite)
    site.__dict__.update(
        kind=kind, node=node, node_path=node_path, branch=branch, step=step, task=task, ordinal=ordinal
    )
    return site


def site_from_metadata(
    kind: str, metadata: dict[str, Any], counter: Callable[[str, str], int], branches: dict[str, Any] | None = None
) -> CallSite:
    """The site of a call made with these runnable metadata; ``counter(task, kind)`` gives its ordinal.

    ``branches`` maps task ids to their raw paths (filled by the task recorder),
    for the branch of every enclosing task.
    """
    ns = metadata.get("langgraph_checkpoint_ns") or metadata.get("checkpoint_ns") or ""
    node = metadata.get("langgraph_node") or ""
    if ns and "|" not in ns:
        # a task of the root graph (most calls): its name, and its own branch (no enclosing task), without
        # the lists and joins of the general case below, which give the same for one segment
        node_path = ns.partition(":")[0]
        branch = branch_of(metadata)
    else:
        pairs = [seg.partition(":") for seg in ns.split("|") if seg] if ns else []
        segments = [name for name, _, _ in pairs]
        node_path = "/".join(segments) if segments else node
        # The branch of every enclosing task, not just the innermost: two Send
        # workers that each invoke a subgraph differ only in the outer index.
        if branches and pairs:
            branch = "/".join(branch_of({"langgraph_path": branches.get(tid)}) for _, _, tid in pairs[:-1])
            branch = f"{branch}/{branch_of(metadata)}" if branch else branch_of(metadata)
        else:
            branch = branch_of(metadata)
    step = metadata.get("langgraph_step")
    task = ns or "(root)"
    counted = task
    slot = metadata.get(BATCH_SLOT_KEY)
    if slot is not None:
        # One input of a model.batch(): its slot is part of the site, and ordinals are
        # counted per slot, because the batch's threads reach this point in any order.
        branch = f"{branch}#{slot}"
        counted = f"{task}#{slot}"
    return _new_site(kind, node, node_path, branch, step, task, counter(counted, kind))


@dataclasses.dataclass
class RecordedCall:
    """A call as it is on the tape."""

    call_id: str
    run_id: str
    seq: int
    kind: str
    node: str
    node_path: str
    branch: str
    step: int | None
    ordinal: int
    fingerprint: str
    request_ref: str
    messages_ref: str | None
    response_ref: str | None
    error: dict[str, Any] | None
    tokens: int
    cost: float
    latency: float
    name: str | None
    #: fingerprint of the tool's or effect's code when recorded (None on older tapes)
    code: str | None = None
    #: the stored response, read with the run's other calls when a replay indexes the tape (see
    #: ``Matcher.from_store``): decoded only if the call is served
    response_data: bytes | None = dataclasses.field(default=None, repr=False, compare=False)
    #: the messages the response refers to (address -> stored JSON), read with it (see
    #: ``Matcher.from_events``): serving the call reads nothing from the store
    message_data: dict[str, bytes] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    #: ``response_data`` parsed, when the indexing parsed it (a chat response, for its message addresses):
    #: handed to the first :meth:`response_env` instead of parsing it again
    parsed_env: Any = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def from_event(cls, row: EventRow) -> RecordedCall:
        """The call recorded in a stored ``llm_call``/``tool_call``/``effect_call`` row.

        Read from the stored body's keys (a call event's keys are its field names, see
        :class:`graphtape.events.CallEvent`) without building the event first: a frozen
        dataclass of 22 fields cost about two thirds of this, for every call of every run a
        replay indexes.
        """
        call_kind = _CALL_KIND_OF.get(row.kind)
        d = row.data
        get = d.get
        call_id, fingerprint, request = get("call_id"), get("fingerprint"), get("request")
        if call_kind is None or call_id is None or fingerprint is None or request is None:
            raise ValueError(f"event {row.seq} of run {row.run_id} ({row.kind}) is not a complete recorded call")
        node_path, branch, ordinal = get("node_path"), get("branch"), get("ordinal")
        return cls(
            call_id=call_id,
            run_id=row.run_id,
            seq=row.seq,
            kind=call_kind,
            # (``node`` is not a call event field: an older tape's, kept among the event's extra keys)
            node=get("node", ""),
            node_path=node_path if node_path is not None else "",
            branch=branch if branch is not None else "",
            step=get("step"),
            ordinal=ordinal if ordinal is not None else 0,
            fingerprint=fingerprint,
            request_ref=request,
            messages_ref=get("messages"),
            response_ref=get("response"),
            error=get("error"),
            tokens=int(get("tokens") or 0),
            cost=float(get("cost") or 0.0),
            latency=float(get("latency") or 0.0),
            name=get("name") or get("model"),  # CallEvent.title
            code=get("code"),
        )

    @property
    def key(self) -> tuple[str, str, str]:
        return match_key(self.kind, self.node_path, self.fingerprint)

    def response_env(self, store: TapeStore) -> Any:
        """The stored response's envelope: a new one on every call (decoding shares parts of it with
        the value it returns, which the caller may change), the one parsed while the tape was
        indexed (``parsed_env``) the first time."""
        if self.response_ref is None:
            return None
        env, self.parsed_env = self.parsed_env, None
        if env is not None:
            return env
        if self.response_data is not None:
            return json.loads(self.response_data)
        return store.get_json(self.response_ref)

    def getter(self, store: TapeStore) -> Any:
        """What decodes this call's response: the messages read with it, else the store."""
        if not self.message_data:
            return store.get_json
        found = self.message_data
        return lambda h: json.loads(found[h]) if h in found else store.get_json(h)
