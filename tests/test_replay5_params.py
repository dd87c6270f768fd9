"""A chat call's parameters asked without langchain's deprecation-silencing detour (issue 13, benchmark 2).

``llm.model_request`` asks the model for its invocation parameters on every
call (a field changed on the model must change the request). langchain's own
``_get_invocation_params`` reaches ``asdict()`` through the deprecated
``dict()`` inside a context manager that silences its warning; for a class
that keeps langchain's three methods, ``llm._invocation_params`` calls
``asdict()`` directly. The result must be the dict langchain's method gives,
and a class that overrides any of the three must still be asked through its
override.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from graphtape.record import llm
from graphtape.testing import SeededChatModel


class OwnParams(SeededChatModel):
    """A provider-style class with its own ``_get_invocation_params``."""

    def _get_invocation_params(self, stop: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
        return {"own": True, "stop": stop, **kwargs}


class OldDict(SeededChatModel):
    """A class still overriding the deprecated ``dict()``."""

    def dict(self, **kwargs: Any) -> dict[str, Any]:
        return {"from_dict": True}


@pytest.mark.parametrize(
    ("stop", "kwargs"),
    [(None, {}), (["\n"], {}), (None, {"temperature": 0.2, "tools": [{"name": "x"}]}), (["a"], {"stop_x": 1})],
)
def test_same_params_as_langchain(stop: Any, kwargs: dict[str, Any]) -> None:
    model = SeededChatModel(seed=3, latency=0, temperature=0.7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the direct path must not warn either
        got = llm._invocation_params(model, stop, dict(kwargs))
    assert got == model._get_invocation_params(stop=stop, **kwargs)
    assert list(got) == list(model._get_invocation_params(stop=stop, **kwargs))  # key order is stored
    assert llm._PLAIN_CLASSES[SeededChatModel] is True


def test_a_changed_field_changes_the_params() -> None:
    model = SeededChatModel(seed=3, latency=0, temperature=0.7)
    before = llm._invocation_params(model, None, {})
    model.temperature = 0.1
    after = llm._invocation_params(model, None, {})
    assert before != after and after == model._get_invocation_params(stop=None)


@pytest.mark.parametrize("cls", [OwnParams, OldDict])
def test_overrides_are_asked(cls: type[SeededChatModel]) -> None:
    model = cls(seed=1, latency=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = model._get_invocation_params(stop=["s"], temperature=1)
        got = llm._invocation_params(model, ["s"], {"temperature": 1})
    assert got == expected
    assert llm._PLAIN_CLASSES[cls] is False
    assert ("own" in got) if cls is OwnParams else ("from_dict" in got)


def test_model_request_uses_the_same_params() -> None:
    llm._REQUESTS.clear()
    model = OwnParams(seed=1, latency=0)
    request, _, _ = llm.model_request(model, None, {"temperature": 0.3}, frozenset())
    assert request["model"]["own"] is True and request["model"]["temperature"] == 0.3
