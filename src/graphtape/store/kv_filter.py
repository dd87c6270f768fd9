"""Search filters of the LangGraph store: checked before a search, evaluated on each stored value.

LangGraph documents a filter as fields of the value with a value to equal, or
an operator among ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``, and
leaves the edges to each store. Here, the same on every backend:

* only top-level fields of the value are named; a nested object in a filter
  matches when the fields it gives match (``{"meta": {"lang": "en"}}``), a
  list matches element by element;
* equality is JSON's: ``true`` is not ``1``, ``1`` is ``1.0``;
* ``$gt``/``$gte``/``$lt``/``$lte`` hold between two numbers or two strings,
  and are false otherwise (a missing field included);
* a missing field is ``null``, so ``{"f": {"$ne": "x"}}`` matches an item
  without ``f`` (as LangGraph's in-memory store does);
* an unknown operator, operators mixed with field names, or a comparison
  with anything but a number or a string is refused (:class:`InvalidFilter`).

Rejected: evaluating filters in SQL. SQLite's ``json_extract`` and
PostgreSQL's ``jsonb`` disagree on booleans against numbers and on number
precision, and Redis has no query language; one evaluation in Python keeps
the backends identical, at the cost of reading every item under the searched
prefix when a filter is given.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from graphtape.errors import GraphtapeError

__all__ = ["OPERATORS", "InvalidFilter", "check_filter", "json_equal", "matches_filter"]

#: the filter operators LangGraph documents
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


class InvalidFilter(GraphtapeError, ValueError):
    """A filter this store cannot evaluate (the message says what to change)."""


def check_filter(filter: Any) -> None:
    """Raise :class:`InvalidFilter` when ``filter`` is not a filter this store can evaluate."""
    if not isinstance(filter, Mapping):
        raise InvalidFilter(f"a filter is an object of fields, not {type(filter).__name__}; e.g. {{'kind': 'note'}}")
    for field, condition in filter.items():
        if not isinstance(field, str):
            raise InvalidFilter(f"filter field {field!r} is not a string")
        if field.startswith("$"):
            raise InvalidFilter(
                f"filter field {field!r}: an operator must follow a field name, e.g. {{'score': {{'$gt': 1}}}}"
            )
        _check_condition(field, condition)


def _check_condition(field: str, condition: Any) -> None:
    if isinstance(condition, Mapping):
        operators = [k for k in condition if isinstance(k, str) and k.startswith("$")]
        if not operators:
            check_filter(condition)
            return
        if len(operators) != len(condition):
            raise InvalidFilter(
                f"filter field {field!r} mixes operators and fields; use {{'$gt': 1, '$lt': 5}} or {{'sub': 1}}"
            )
        for op, arg in condition.items():
            if op not in OPERATORS:
                raise InvalidFilter(
                    f"unknown filter operator {op!r} on field {field!r}; use one of {', '.join(OPERATORS)}"
                )
            if op in ("$eq", "$ne"):
                _check_json(field, arg)
            elif isinstance(arg, bool) or not isinstance(arg, (int, float, str)):
                raise InvalidFilter(f"{op} on field {field!r} compares with a number or a string, not {arg!r}")
            elif isinstance(arg, float) and not math.isfinite(arg):
                raise InvalidFilter(f"{op} on field {field!r} needs a finite number, not {arg!r}")
    else:
        _check_json(field, condition)


def _check_json(field: str, value: Any) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidFilter(f"filter value of field {field!r} is not JSON: {exc}") from None


def matches_filter(value: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """Whether a stored value matches a filter checked by :func:`check_filter` (see the module docstring)."""
    return all(_matches(value.get(field), condition) for field, condition in filter.items())


def _matches(actual: Any, condition: Any) -> bool:
    if isinstance(condition, Mapping):
        if any(k.startswith("$") for k in condition):
            return all(_apply(actual, op, arg) for op, arg in condition.items())
        return isinstance(actual, Mapping) and all(_matches(actual.get(k), c) for k, c in condition.items())
    return json_equal(actual, condition)


def _apply(actual: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return json_equal(actual, arg)
    if op == "$ne":
        return not json_equal(actual, arg)
    order = _compare(actual, arg)
    if order is None:
        return False
    return {"$gt": order > 0, "$gte": order >= 0, "$lt": order < 0, "$lte": order <= 0}[op]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _compare(a: Any, b: Any) -> int | None:
    if (_is_number(a) and _is_number(b)) or (isinstance(a, str) and isinstance(b, str)):
        return (a > b) - (a < b)
    return None


def json_equal(a: Any, b: Any) -> bool:
    """Equality of two JSON values as JSON sees them: ``true`` is not ``1``, ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if type(a) is not type(b):
        return False
    return bool(a == b)
