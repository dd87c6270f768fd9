"""The tape writer of one run: buffering, content addressing and flushing.

A run's events, blobs and message chains are buffered here and written in
one store transaction per flush: from the checkpoint tap (which runs off the
main thread under LangGraph's default ``durability="async"``), beside
graphtape's own saver in the checkpoint's own transaction, and at the end of
the run. Values are stored by address (``serde.digest`` of their stored
JSON); an address this run already wrote is not sent again.

The :class:`~graphtape.record.session.Session` keeps what the run *is*
(identity, counts, the calls in flight); this object only turns what it is
told into rows.
"""

from __future__ import annotations

import contextlib
import copy
import operator
import threading
import time
from collections.abc import Callable
from itertools import repeat
from typing import Any

from langchain_core.messages import BaseMessage

from graphtape import clock, events, serde
from graphtape.store.base import EventRow, RunRecord, TapeStore, WriteBatch
from graphtape.store.journal import TRIM_OVER, UNJOURNALED_KINDS

#: Beside a foreign checkpoint saver, the tape is written at most this often
#: (and at the end of every run): one extra transaction per super-step was
#: the largest recording cost measured. graphtape's own saver writes the tape
#: in the checkpoint's transaction instead.
FLUSH_INTERVAL = 0.05


#: Probe the store for an existing prefix of a message list this long or longer (one indexed read
#: instead of re-sending a conversation's whole history on every turn).
PROBE_MIN = 8
#: How many of the longest prefixes one probe asks about.
PROBE_WIDTH = 4
#: Entries kept in the process-wide memos below before they are dropped (and rebuilt as needed).
MEMO_MAX = 50_000
#: Bytes of stored message JSON the message memo (``_FORMS``) may hold, counted twice (the form's
#: bytes and the private copy of the message, about as large): past it, its older half is dropped.
#: A conversation's messages are met again on every turn; a dropped one is serialised once more.
MEMO_BYTES = 64 << 20


class MessageForm:
    """A message as the tape stores it: request JSON, stored bytes, blob address, canonical key."""

    __slots__ = ("data", "h", "js", "key")

    def __init__(self, js: dict[str, Any]):
        self.js = js
        self.data = serde.stored_json(js)
        self.h = serde.digest(self.data)
        self.key: str | None = None


#: (message class, message id) -> (a private copy of the message's fields, one of its extra fields, its
#: form). A conversation's history comes back from the checkpointer as new objects on every turn; an
#: equal message (pydantic equality: every field, and the extra fields a message class allows, which
#: pydantic keeps apart from ``__dict__`` and the stored form includes) with the same id has the same
#: form, found here instead of serialised again.
_FORMS: dict[tuple[type, str], tuple[dict[str, Any], Any, MessageForm]] = {}
#: what the entries of ``_FORMS`` hold, as counted against MEMO_BYTES
_forms_bytes = 0
#: (parent chain id, item address) -> chain id: a request repeats its history's chain
_CHAIN_IDS: dict[tuple[str | None, str], str] = {}


def message_form(msg: Any) -> MessageForm:
    """The stored form of ``msg``, from the process-wide memo when an equal message was seen before."""
    mid = msg.id
    if isinstance(mid, str):
        hit = _FORMS.get((type(msg), mid))
        # the fields compared as a dict (what pydantic's ``==`` compares, in C): once per message and
        # turn; the extra fields too (usually both empty: one more comparison of two small dicts)
        if hit is not None and hit[0] == msg.__dict__ and hit[1] == msg.__pydantic_extra__:
            return hit[2]
    form = MessageForm(serde.message_for_request(msg))
    if isinstance(mid, str):
        global _forms_bytes
        size = 2 * len(form.data)
        if len(_FORMS) >= MEMO_MAX or _forms_bytes + size > MEMO_BYTES:
            _drop_older_forms()
        # a copy: the caller may change its message in place later, the memo must keep what was hashed
        old = _FORMS.get((type(msg), mid))
        _FORMS[(type(msg), mid)] = (
            {k: frozen(v) for k, v in msg.__dict__.items()},
            frozen(msg.__pydantic_extra__),
            form,
        )
        _forms_bytes += size - (2 * len(old[2].data) if old is not None else 0)
    return form


def frozen(value: Any) -> Any:
    """A copy of a message field's value that changes made in place to the message cannot reach.

    A message's fields are JSON-like (strings, the ``content`` list, the
    ``tool_calls`` and metadata dicts): copied here container by container,
    anything else with ``copy.deepcopy``. It is compared with ``==`` to the
    fields of a message met later, as the message's deep copy was: equal
    values, in a quarter of ``model_copy(deep=True)``'s time (6-10 against 23-42 us per
    new AI message with tool calls and usage metadata, once per message a run meets first).
    """
    t = type(value)
    if t is str or t is int or t is float or t is bool or value is None:
        return value
    if t is dict:
        return {k: frozen(v) for k, v in value.items()}
    if t is list:
        return [frozen(v) for v in value]
    return copy.deepcopy(value)


_is = operator.is_
_fields_of = operator.attrgetter("__dict__")
_extra_of = operator.attrgetter("__pydantic_extra__")


def _same_messages(
    messages: list[Any], last: tuple[list[Any], list[dict[str, Any]], list[Any], list[MessageForm]]
) -> int:
    """How many leading ``messages`` are the messages of ``last`` (TapeWriter.forms' last list), unchanged.

    A run's final state holds the message objects its last chat request
    carried, plus the answer: their forms are that request's, found with
    identity and equality tests run in C (the fields of each compared with
    the copy the forms were made from, as forms' loop does: a message
    changed in place since is seen). 0 if any differs.
    """
    prev = last[0]
    n = len(prev)
    if n < PROBE_MIN or len(messages) < n:
        return 0
    head = messages[:n]
    if not all(map(_is, head, prev)):
        return 0
    if list(map(_fields_of, head)) != last[1] or list(map(_extra_of, head)) != last[2]:
        return 0
    return n


#: a message list as :meth:`TapeWriter.history` hands it to the thread's next run: the class of each
#: message, the copies of its fields and its extra fields its form was made from, and the forms
History = tuple[list[type], list[dict[str, Any]], list[Any], list[MessageForm]]


def _carried_head(messages: list[Any], carried: History) -> int:
    """How many leading ``messages`` are equal to the messages of ``carried``, class for class: the head
    of a conversation's request that is the thread's last run's final state (0 if any differs).

    The request's history is that state read back from the checkpointer:
    new objects, equal to it. Equal fields (the id among them) and extra
    fields of the same class give the same form, the test of
    :func:`message_form`; here it runs without the memo look-up of each
    message that :func:`_known_head` makes (a key and a hash per message),
    as three list comparisons in C. A message changed since is seen as
    there: its fields differ from the copy.
    """
    types = carried[0]
    n = len(types)
    if n < PROBE_MIN or len(messages) < n:
        return 0
    head = messages[:n]
    if list(map(type, head)) != types:
        return 0
    if list(map(_fields_of, head)) != carried[1] or list(map(_extra_of, head)) != carried[2]:
        return 0
    return n


_type_and_id = operator.attrgetter("__class__", "id")
_memo_copy = operator.itemgetter(0)
_memo_extra = operator.itemgetter(1)
_memo_form = operator.itemgetter(2)


def _known_head(messages: list[Any]) -> tuple[list[dict[str, Any]], list[Any], list[MessageForm]]:
    """The memo's field copies, extra fields and forms of the longest head of ``messages`` whose every
    message is in the message memo unchanged (the test of :func:`message_form`: an equal message with
    the same id); empty lists if a message of that head changed.

    A conversation's request carries its whole history, new objects on every
    turn (the checkpointer deserialises it) but equal to the messages met on
    the turn before, followed by the new ones. At turn 200 the per-message
    loop of :meth:`TapeWriter.forms` (a memo look-up and two comparisons in
    Python, for 400 messages) was the largest recording cost that grows with
    the history. Here the look-ups and comparisons of the known head run as
    whole-list operations in C (``map``; list ``==`` compares element by
    element with ``==``, as the loop does); the messages after it, and a
    head that changed, go through the loop.
    """
    try:
        entries: list[Any] = list(map(_FORMS.get, map(_type_and_id, messages)))
    except TypeError:  # an unhashable id: the loop deals with it
        return [], [], []
    if None in entries:  # (the entries are tuples or None)
        n = entries.index(None)
        if n == 0:
            return [], [], []
        del entries[n:]
        head = messages[:n]
    else:
        head = messages
    copies = list(map(_memo_copy, entries))
    extras = list(map(_memo_extra, entries))
    if copies != list(map(_fields_of, head)) or extras != list(map(_extra_of, head)):
        return [], [], []
    return copies, extras, list(map(_memo_form, entries))


#: how many times the message memo dropped its older half: message lists carried from run to run (see
#: TapeWriter.history) hold copies the memo held, and are let go when it drops them
forms_drops = 0


def _drop_older_forms() -> None:
    """Drop the older half of the message memo (in insertion order; racing threads only lose hits)."""
    global _forms_bytes, forms_drops
    forms_drops += 1
    keys = list(_FORMS)
    for key in keys[: len(keys) // 2 + 1]:
        entry = _FORMS.pop(key, None)
        if entry is not None:
            _forms_bytes -= 2 * len(entry[2].data)
    _forms_bytes = max(_forms_bytes, 0)


#: first item address -> (the last item list whose chain was worked out with it first, its chain ids);
#: at most PREFIXES_MAX lists (a conversation each, about 16 bytes per message)
_CHAIN_PREFIXES: dict[str, tuple[list[str], list[str]]] = {}
PREFIXES_MAX = 1024


def chain_ids(hashes: list[str]) -> list[str]:
    """The chain node id of every prefix of ``hashes`` (content addressed: parent id + item).

    A conversation's request is the previous one's messages plus the new
    ones: the ids of the longest list met before with the same first item
    are reused when it is a prefix of ``hashes`` (one list comparison in C)
    and only the new items are looked up, instead of one memo look-up per
    message of the history on every turn.
    """
    if not hashes:
        return []
    known = _CHAIN_PREFIXES.get(hashes[0])
    if known is not None:
        prefix, ids = known
        n = len(prefix)
        if n == len(hashes) and prefix == hashes:
            return list(ids)
        if n < len(hashes) and hashes[:n] == prefix:
            out = _chain_ids(hashes[n:], ids[-1], list(ids))
            _CHAIN_PREFIXES[hashes[0]] = (list(hashes), out)
            return list(out)
        if n > len(hashes) and prefix[: len(hashes)] == hashes:
            return ids[: len(hashes)]
    out = _chain_ids(hashes, None, [])
    if len(_CHAIN_PREFIXES) >= PREFIXES_MAX:
        _CHAIN_PREFIXES.clear()
    _CHAIN_PREFIXES[hashes[0]] = (list(hashes), out)
    return list(out)


def _chain_ids(hashes: list[str], parent: str | None, out: list[str]) -> list[str]:
    """``out`` extended with the chain ids of ``hashes`` after the node ``parent``."""
    memo = _CHAIN_IDS
    for mh in hashes:
        cid = memo.get((parent, mh))
        if cid is None:
            cid = serde.digest(f"{parent or ''}/{mh}")
            if len(memo) >= MEMO_MAX:
                memo.clear()
            memo[(parent, mh)] = cid
        out.append(cid)
        parent = cid
    return out


def _all_messages(values: list[Any] | tuple[Any, ...]) -> bool:
    """Whether every item is a message (the test runs in C: a conversation's state holds hundreds)."""
    return all(map(isinstance, values, repeat(BaseMessage)))


def _holds_messages(value: Any) -> bool:
    """A message, or a non-empty list of messages (the values :meth:`TapeWriter.encode` takes apart)."""
    return isinstance(value, BaseMessage) or (type(value) is list and bool(value) and _all_messages(value))


class Lazy:
    """An event field computed at flush time (off the hot path when LangGraph saves in the background)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn

    def resolve(self) -> Any:
        return self.fn()


class TapeWriter:
    """Buffers one run's rows and writes them, fenced by the run's thread lease."""

    def __init__(self, store: TapeStore, run_id: str):
        self.store = store
        self.run_id = run_id
        #: the thread's lease (one writer per thread); its token fences every write
        self.lease: Any = None
        #: write this run's events as plain JSON (a strict replay's: see ``codec.pack_event_plain``)
        self.plain_events = False
        # ``_lock`` guards the buffer and is only ever held for a few dict and list operations:
        # the interceptions on the run's thread take it for every row. ``_flushing`` orders the
        # flushes (a batch may refer to blobs and chain nodes an earlier batch wrote) and is held
        # across the store write, which the buffer lock never is: a call recorded on the run's
        # thread does not wait for a checkpoint that LangGraph's background thread is writing.
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._batch = WriteBatch()
        #: events of the buffer with a Lazy field, resolved by the next flush
        self._lazy: list[EventRow] = []
        self._seq = 0
        # Addresses this run already wrote: not sent again. Per run, not per
        # process: garbage collection (``prune``) may delete a blob between two
        # runs, and a later run must then write it again, not point at nothing.
        self._written: set[str] = set()
        #: id(message) -> (message, ids of its field values, form), for messages without an id: see message_blob
        self._messages: dict[int, tuple[Any, tuple[int, ...], MessageForm]] = {}
        self._last_flush = time.monotonic()
        #: the last message list :meth:`forms` took (messages all with ids): the messages, the copies of their
        #: fields the forms were made from, their extra fields then, and the forms (see _same_messages)
        #: the chain ids (a list's and its prefixes') of the last message list put_messages stored (see
        #: Session.finish)
        self.last_chain: list[str] = []
        self._last_forms: tuple[list[Any], list[dict[str, Any]], list[Any], list[MessageForm]] | None = None
        #: the message list the thread's last run ended with (see carry)
        self._carried: History | None = None
        #: seconds each store write of this run took (summarised into ``meta.write_ms``)
        self.write_seconds: list[float] = []
        #: the run's call journal (see secure), opened on first use; ``_journal_off`` once the store
        #: has none (or it failed): completed calls are then written to the store at once
        self._journal: Any = None
        self._journal_off = False
        #: rows in the journal and not in the store yet: the next flush writes them first
        self._secured = WriteBatch()
        #: the journal's frame count when the last flush took its rows, and whether every frame it
        #: holds was committed since (see flush and close_journal)
        self._journal_mark = 0
        self._journal_clean = True

    def assume_stored(self, blobs: set[str], chains: set[str]) -> None:
        """Addresses this run need not write: the store has them (and a chain node's ancestors and items).

        For a replay: what the events of the runs it replays refer to, as it
        read them when it began. Stored events keep what they refer to (garbage
        collection follows their addresses), so only addresses read from runs
        that exist now are given here, never a process-wide set.
        """
        with self._lock:
            self._written.update(blobs)
            self._written.update(chains)

    # -- content addressing -------------------------------------------------------------

    def put_json(self, obj: Any) -> str:
        """Store a JSON value in its own key order (hash what is matched on: ``serde.canonical_json``)."""
        data = serde.stored_json(obj)
        h = serde.digest(data)
        if h not in self._written and h not in self._secured.blobs:
            with self._lock:
                self._batch.blobs[h] = data
        return h

    def encode(self, obj: Any) -> dict[str, Any]:
        """An exactly restorable envelope; messages stored once, by reference.

        The envelope of :func:`serde.encode_value`, with the messages of the
        usual shapes (a message, a list of messages: a model's answer; a dict
        holding them: a run's input) through :meth:`message_blob`: a model's
        answer met again in the next request, the task's writes and the final
        state is serialised and hashed once, not once here and once more there.
        """
        if isinstance(obj, BaseMessage):
            return self._message_env(obj)
        t = type(obj)
        if t is list and obj and _all_messages(obj):
            return {"t": "list", "v": [self._message_env(m) for m in obj]}
        if t is dict and obj and all(type(k) is str for k in obj) and any(map(_holds_messages, obj.values())):
            # serde's "dict" envelope (a message is not plain JSON), its values encoded one by one
            return {"t": "dict", "v": {k: self.encode(v) for k, v in obj.items()}}
        return serde.encode_value(obj, self.put_json)

    def _message_env(self, msg: Any) -> dict[str, Any]:
        """serde.encode_value's envelope of a message (its blob without id, the id beside it)."""
        env: dict[str, Any] = {"t": "msg", "h": self.message_blob(msg)[1]}
        if msg.id is not None:
            env["id"] = msg.id
        return env

    def message_blob(self, msg: Any, *, store: bool = True) -> tuple[dict[str, Any], str]:
        """A message's request JSON and its blob address, computed once per message in a run.

        A run meets the same message objects several times: in every chat
        request that carries the history, and again in the final state. At
        turn 200 of a conversation, turning 400 messages into JSON twice was
        half the cost of recording the turn. A message with an id is looked
        up by content in the process-wide memo (:func:`message_form`); one
        without is kept in the run's memo, which holds the message (so its
        ``id()`` is not reused) and the identities of its field values (a
        field given a new value is seen and the message is read again).
        ``store=False``: only the address (the caller stores it with a chain,
        see :meth:`put_messages`).
        """
        form = self._form(msg)
        if store:
            self._put_data(form.h, form.data)
        return form.js, form.h

    def forms(self, messages: list[Any]) -> list[MessageForm]:
        """The stored form of each message (see :meth:`message_blob`), none of them stored yet.

        At turn 200 of a conversation a request carries 400 messages, all
        new objects (the checkpointer deserialises the history on every
        turn), and the run meets them again in its final state: this loop
        is most of what the recording does per turn that grows with the
        history. A message with an id is looked up in the process-wide memo
        and its fields compared as a dict with the memo's private copy (one
        look-up and one comparison in C, about 1 us; the identities of its
        field values, which the run's own memo compares, took longer to
        collect than the comparison, and missed a change made inside a
        field). A message without an id goes through the run's memo. A list
        that starts with the messages of the run's last list, unchanged (its
        final state after its last chat request), takes their forms from that
        list without the loop: see :func:`_same_messages`.
        """
        last = self._last_forms
        start = _same_messages(messages, last) if last is not None else 0
        if start:
            assert last is not None
            out = last[3][:start]
            if start == len(messages):
                return out
            # the copies of each message's fields and extra fields its form was made from (see _same_messages)
            fields, extras = last[1][:start], last[2][:start]
        elif len(messages) >= PROBE_MIN:
            carried = self._carried
            start = _carried_head(messages, carried) if carried is not None else 0
            if start:
                # a conversation's request: the thread's last final state and the new messages
                assert carried is not None
                fields, extras, out = carried[1][:start], carried[2][:start], carried[3][:start]
            else:
                # a history of new objects equal to messages met before: see _known_head
                fields, extras, out = _known_head(messages)
                start = len(out)
            if start == len(messages):
                self._last_forms = (list(messages), fields, extras, list(out))
                return out
        else:
            fields, extras, out = [], [], []
        seen = _FORMS
        append = out.append
        all_ids = True
        for msg in messages[start:] if start else messages:
            d = msg.__dict__
            mid = d.get("id")
            if type(mid) is str:
                key = (type(msg), mid)
                known = seen.get(key)
                # the same test as message_form's (an equal message with the same id), without the call
                if known is not None and known[0] == d and known[1] == msg.__pydantic_extra__:
                    append(known[2])
                else:
                    form = message_form(msg)
                    append(form)
                    known = seen.get(key)
                    if known is None or known[2] is not form:  # (the memo dropped it at once)
                        all_ids = False
                        continue
                fields.append(known[0])
                extras.append(known[1])
            else:
                append(self._form(msg))
                all_ids = False
        if all_ids and len(messages) >= PROBE_MIN:
            # copies: the caller may change the lists it is given. Only a list _same_messages may take
            # (a task's writes, viewed when the run's end is flushed, leave its final state's in place)
            self._last_forms = (list(messages), fields, extras, list(out))
        return out

    def history(self) -> History | None:
        """The last list of PROBE_MIN or more messages, all with ids, :meth:`forms` took (once a run's
        end is written, its final state's), to :meth:`carry` to the thread's next run."""
        last = self._last_forms
        if last is None:
            return None
        return list(map(type, last[0])), last[1], last[2], last[3]

    def carry(self, history: History) -> None:
        """Take the thread's last run's final message list (:meth:`history`): the head of this run's
        requests, new objects equal to it, gets its forms with :func:`_carried_head`."""
        self._carried = history

    def _form(self, msg: Any) -> MessageForm:
        if type(msg.id) is str:
            return message_form(msg)
        # (an extra field set on the message replaces a value in its extra dict: seen the same way)
        extra = msg.__pydantic_extra__
        fields = tuple(map(id, msg.__dict__.values())) + (tuple(map(id, extra.values())) if extra else ())
        hit = self._messages.get(id(msg))
        if hit is not None and hit[0] is msg and hit[1] == fields:
            form: MessageForm = hit[2]
            return form
        form = message_form(msg)
        self._messages[id(msg)] = (msg, fields, form)
        return form

    def _put_data(self, h: str, data: bytes) -> None:
        if h not in self._written and h not in self._secured.blobs:
            with self._lock:
                self._batch.blobs[h] = data

    def put_data(self, h: str, data: bytes) -> None:
        """Buffer a blob whose stored bytes and address (``serde.digest(data)``) the caller worked out
        (and kept: a value met on every run is serialised once per process, not once per run)."""
        self._put_data(h, data)

    @staticmethod
    def form_key(form: MessageForm) -> str:
        """The canonical key of a message form (see :meth:`message_key`), computed once."""
        if form.key is None:
            form.key = serde.digest(serde.canonical_bytes(form.js))
        return form.key

    def message_key(self, msg: Any) -> str:
        """The digest of a message's *canonical* JSON: what request fingerprints are built from.

        The blob address (``message_blob``) hashes the stored, order-preserving
        JSON; fingerprints must not depend on key order (and must stay what
        tapes recorded before blobs kept their order), so they use this key.
        """
        return self.form_key(self._form(msg))

    def message_ref(self, msg: Any) -> dict[str, Any]:
        ref: dict[str, Any] = {"$m": self.message_blob(msg)[1]}
        if msg.id is not None:
            ref["id"] = msg.id
        return ref

    def view(self, obj: Any) -> Any:
        """A compact JSON view for display and comparison.

        Messages become references to their (id-less) blob and lists of
        messages become chains, which share their prefixes with the chat
        requests already on the tape: the final state of turn 200 of a
        conversation adds one chain node, not 400 messages.
        """
        if isinstance(obj, BaseMessage):
            return self.message_ref(obj)
        if isinstance(obj, (list, tuple)) and obj and _all_messages(obj):
            forms = self.forms(list(obj))
            return {"$chain": self.put_messages([f.h for f in forms], forms)}
        if isinstance(obj, dict):
            return {str(k): self.view(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.view(v) for v in obj]
        if hasattr(obj, "model_dump") and not isinstance(obj, type) and hasattr(type(obj), "model_fields"):
            return {k: self.view(getattr(obj, k)) for k in type(obj).model_fields}
        return serde.to_jsonable(obj)

    def put_messages(self, hashes: list[str], forms: list[MessageForm] | None = None) -> str | None:
        """Store a message list as a chain; returns its head (content addressed).

        With ``forms`` (the forms of the messages ``hashes`` are the addresses
        of, not stored yet: see :meth:`forms`), only the part of the
        chain the store lacks is written, with its messages' blobs: a chain
        node on the tape implies its ancestors and their items are there too
        (they are written together, and garbage collection keeps a node's
        ancestors). What this run wrote is known; for a long list the store
        is asked once about the longest prefixes (a conversation's request
        is the previous turn's messages plus the new ones).
        """
        if not hashes:
            return None
        ids = chain_ids(hashes)
        self.last_chain = ids
        start = self._known_prefix(ids)
        if forms is not None:
            if len(ids) - start >= PROBE_MIN:
                start = max(start, self._probe(ids, hashes, start))
            for form in forms[start:]:
                self._put_data(form.h, form.data)
        new: dict[str, tuple[str | None, str]] = {}
        for i in range(start, len(ids)):
            cid = ids[i]
            if cid not in self._written:
                new[cid] = (ids[i - 1] if i else None, hashes[i])
        if new:
            with self._lock:
                self._batch.chains.update(new)
        return ids[-1]

    def _known_prefix(self, ids: list[str]) -> int:
        """How many leading nodes of ``ids`` this run wrote or queued (a node is never stored without its
        ancestors)."""
        chains, secured = self._batch.chains, self._secured.chains
        for i in range(len(ids) - 1, -1, -1):
            if ids[i] in self._written or ids[i] in chains or ids[i] in secured:
                return i + 1
        return 0

    def _probe(self, ids: list[str], hashes: list[str], start: int) -> int:
        """How many leading nodes of ``ids`` the store has, asking about the longest prefixes only."""
        wanted = ids[max(start, len(ids) - PROBE_WIDTH) :]
        try:
            found = self.store.get_chain_nodes(wanted)
        except Exception:  # the probe is an optimisation: writing everything is always correct
            return start
        for i in range(len(ids) - 1, len(ids) - 1 - len(wanted), -1):
            if ids[i] in found:
                with self._lock:
                    self._written.update(ids[: i + 1])
                    self._written.update(hashes[: i + 1])
                return i + 1
        return start

    # -- rows ------------------------------------------------------------------------------

    def event(self, kind: str, data: dict[str, Any]) -> int:
        """Buffer an event of this run; returns its sequence number."""
        return self.event_row(kind, data).seq

    def event_row(self, kind: str, data: dict[str, Any]) -> EventRow:
        """Buffer an event of this run; returns its row (as the store will hold it once written)."""
        lazy = Lazy in map(type, data.values())  # (in C: every call and task buffers events)
        with self._lock:
            seq = self._seq
            self._seq += 1
            row = EventRow(self.run_id, seq, kind, clock.now(), data)
            self._batch.events.append(row)
            if lazy:
                self._lazy.append(row)
        return row

    def emit(self, event: events.Event) -> int:
        """Buffer a typed event of this run (its JSON form, see graphtape.events); returns its sequence number."""
        return self.event(event.KIND, event.to_data())

    def new_run(self, run: RunRecord) -> None:
        with self._lock:
            self._batch.new_runs.append(run)

    def run_unwritten(self, run_id: str) -> bool:
        """Whether ``run_id``'s new row is still in the buffer (not written, or put back by a failed write)."""
        with self._lock:
            return any(run.run_id == run_id for run in self._batch.new_runs)

    def update_run(self, update: dict[str, Any]) -> None:
        with self._lock:
            self._batch.run_updates.append((self.run_id, update))

    def defer(self, batch: WriteBatch) -> None:
        """Add ``batch`` to what the next flush writes (in the same transaction)."""
        with self._lock:
            self._batch.extend(batch)

    # -- flushing ------------------------------------------------------------------------

    def maybe_flush(self) -> None:
        """Flush if the last flush is older than ``FLUSH_INTERVAL`` (used beside foreign savers)."""
        if time.monotonic() - self._last_flush >= FLUSH_INTERVAL:
            self.flush()

    def secure(self) -> bool:
        """Make the rows buffered so far survive the death of this process, before the run goes on.

        Returns whether rows went to the journal and wait there for a flush.

        With a store that keeps call journals (a SQLite file: see
        :mod:`graphtape.store.journal`) the rows are appended to the run's
        journal, one ``write()``, and stay buffered: the run's next flush (its
        next checkpoint, or its end) writes them in its own transaction. Else,
        if the journal fails, or if the run's last write is older than
        ``FLUSH_INTERVAL``, they are written to the store now. A
        checkpoint event stays in the buffer: it is only true with its
        checkpoint's row, which the journal does not hold.
        """
        if time.monotonic() - self._last_flush >= FLUSH_INTERVAL:
            # Calls far apart (a hosted model's) are each written at once: a transaction costs little
            # beside such a call, and readers in other processes (a Studio) see each call as it ends.
            # The journal takes the calls that follow each other fast.
            self.flush()
            return False
        if self._journal_off:
            self.flush()
            return False
        journal = self._journal
        if journal is None:
            journal = self._open_journal()
            if journal is None:
                self.flush()
                return False
        # Lazy fields are left to the flushes, which resolve them under their own lock: a resolution
        # here would race with a flush taking the buffer meanwhile (rows with Lazy fields stay buffered)
        with self._lock:
            rows = self._journalable()
            if not rows:
                return False
            try:
                journal.append(rows)
            except BaseException as exc:
                rows.extend(self._batch)
                self._batch = rows
                if not isinstance(exc, OSError):
                    raise  # (a value the store could not encode either: the flush would raise it)
                # written to the store below, and every later call too; the file stays open (and
                # locked) until the run ends: what it holds may not be in the store yet
                self._journal_off = True
            else:
                self._secured.extend(rows)
                self._journal_clean = False
                return True
        self.flush()
        return False

    def holds_checkpoints(self) -> bool:
        """Whether checkpoint rows wait in the buffer (deferred: see ``Session.flush``)."""
        return bool(self._batch.checkpoints)

    def journal_pending(self) -> bool:
        """Whether the journal holds rows the store has not committed yet."""
        return not self._journal_clean

    def _open_journal(self) -> Any:
        try:
            journal = self.store.open_journal(self.run_id, self.lease.fence if self.lease is not None else None)
        except OSError:
            journal = None
        if journal is None:
            self._journal_off = True
        self._journal = journal
        return journal

    def _journalable(self) -> WriteBatch:
        """The buffer's events, blobs and chain nodes, taken out of it (under the lock), but for events
        that must wait for the store: checkpoint events (see secure) and events with a Lazy field (a
        task's end whose writes the next flush resolves, or one on another thread is resolving now)."""
        batch = self._batch
        rows = WriteBatch(blobs=batch.blobs, chains=batch.chains)
        batch.blobs, batch.chains = {}, {}
        events = batch.events
        if any(e.kind in UNJOURNALED_KINDS or Lazy in map(type, e.data.values()) for e in events):
            rows.events = [
                e for e in events if e.kind not in UNJOURNALED_KINDS and Lazy not in map(type, e.data.values())
            ]
            batch.events = [e for e in events if e.kind in UNJOURNALED_KINDS or Lazy in map(type, e.data.values())]
        else:
            rows.events, batch.events = events, []
        return rows

    def close_journal(self) -> None:
        """Close the run's journal: deleted if the store holds every row it had, else left for an import."""
        journal, self._journal = self._journal, None
        self._journal_off = True
        if journal is None:
            return
        with self._lock:
            keep = not self._journal_clean or bool(self._secured)
        try:
            journal.close(keep=keep)
        except OSError:
            pass  # the rows are in the store, or the file stays for an import

    def flush(self, extra: WriteBatch | None = None) -> None:
        """Write the buffered rows, together with ``extra`` (a checkpoint) if given, in one transaction.

        Rows buffered while the store write is under way (by the run's own
        thread, usually) go to the next flush; a failed write puts this one's
        rows back in front of them (except ``extra``'s checkpoint and its
        writes: the saver that handed them over sees the error) and raises.
        """
        with self._flushing:
            self._last_flush = time.monotonic()
            batch = self._take()
            n_checkpoints, n_writes = len(batch.checkpoints), len(batch.writes)
            if extra is not None:
                batch.extend(extra)
            if not batch:
                return
            batch.plain_events = self.plain_events
            try:
                t0 = time.perf_counter()
                self.store.write(batch, fence=self.lease.fence if self.lease is not None else None)
                self.write_seconds.append(time.perf_counter() - t0)
            except BaseException:
                del batch.checkpoints[n_checkpoints:]
                del batch.writes[n_writes:]
                with self._lock:
                    batch.extend(self._batch)
                    self._batch = batch
                    # the rows put back hold no Lazy: every one was resolved by _take
                raise
            with self._lock:
                self._written.update(batch.blobs)
                self._written.update(batch.chains)
                journal = self._journal
                if journal is not None and journal.appended == self._journal_mark and not self._secured:
                    # every frame of the journal is in the store now
                    self._journal_clean = True
                    if journal.size > TRIM_OVER:
                        with contextlib.suppress(OSError):
                            journal.trim()

    def _take(self) -> WriteBatch:
        """The buffer, emptied, with every Lazy field resolved (a resolution buffers its blobs first).

        Resolving calls back into this writer (``put_json``), so it runs
        without the buffer lock; an event with a Lazy field buffered
        meanwhile is resolved in the next round, before the buffer is taken.
        """
        while True:
            with self._lock:
                lazy, self._lazy = self._lazy, []
                if not lazy:
                    batch, self._batch = self._batch, WriteBatch()
                    if self._secured:
                        # the journaled rows first (they were buffered first)
                        secured, self._secured = self._secured, WriteBatch()
                        secured.extend(batch)
                        batch = secured
                    if self._journal is not None:
                        self._journal_mark = self._journal.appended
                    return batch
            self._resolve(lazy)

    def _resolve(self, lazy: list[EventRow]) -> None:
        """Resolve the Lazy fields of ``lazy``'s rows (without the buffer lock: a resolution buffers blobs)."""
        try:
            for row in lazy:
                for key, value in row.data.items():
                    if type(value) is Lazy:
                        row.data[key] = value.resolve()
        except BaseException:
            with self._lock:
                self._lazy[:0] = lazy  # unresolved fields are tried again by the next flush
            raise

    def write_ms(self) -> dict[str, Any]:
        """``{"write_ms": {n, sum, p50, p95, max}}`` of this run's store writes (nearest-rank), or nothing."""
        seconds = self.write_seconds
        if not seconds:
            return {}
        ms = sorted(x * 1000.0 for x in seconds)
        n = len(ms)
        return {
            "write_ms": {
                "n": n,
                "sum": round(sum(ms), 3),
                "p50": round(ms[(n + 1) // 2 - 1], 3),
                "p95": round(ms[max(0, -(-95 * n // 100) - 1)], 3),
                "max": round(ms[-1], 3),
            }
        }
