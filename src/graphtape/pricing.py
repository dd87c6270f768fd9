"""Estimated cost of model calls, for "what did this re-run save" reports.

Prices are USD per million tokens (input, output). They are estimates for
reports, not invoices: override or extend them with
``connect(prices={"my-model": (in, out)})``. A model matches the longest
entry that its name starts with.
"""

from __future__ import annotations

DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    # The offline fake models are priced like a mid-size hosted model so that
    # demos and tests report realistic savings.
    "graphtape-fake": (3.0, 15.0),
    "fake-": (3.0, 15.0),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.0),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.0, 8.0),
    "o3": (2.0, 8.0),
    "claude-3-5-haiku": (0.80, 4.0),
    "claude-3-5-sonnet": (3.0, 15.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-opus-4": (15.0, 75.0),
    "gemini-2.5-flash": (0.30, 2.50),
    "gemini-2.5-pro": (1.25, 10.0),
}


def no_price_hint(model: str | None) -> str:
    """Why a model call has no cost, and how to give it one (the Studio's cost tooltip says the same)."""
    which = f"model {model}" if model else "this model"
    return (
        f"No price known for {which} when the call was recorded. graphtape prices a model by the longest entry of"
        " its price table that the model's name starts with; add yours where the run is recorded:"
        ' graphtape.connect(url, prices={"model-name": (USD per million input tokens, USD per million output tokens)}).'
    )


class PriceTable:
    def __init__(self, prices: dict[str, tuple[float, float]] | None = None):
        self.prices = {**DEFAULT_PRICES, **(prices or {})}
        #: model name -> the entry it matches (None: none), for the prices it was worked out with
        self._entries: dict[str, str | None] = {}
        self._entries_for: dict[str, tuple[float, float]] = {}

    def entry(self, model: str) -> str | None:
        """The longest entry ``model`` starts with, or None.

        Every recorded model call is priced: the scan of every entry is
        done once per model name, and again after ``prices`` was changed.
        """
        if self._entries_for != self.prices:
            self._entries.clear()
            self._entries_for = dict(self.prices)
        try:
            return self._entries[model]
        except KeyError:
            pass
        best = max((k for k in self.prices if model.startswith(k)), key=len, default=None)
        if len(self._entries) >= 4096:
            self._entries.clear()
        self._entries[model] = best
        return best

    def cost(self, model: str | None, input_tokens: int, output_tokens: int) -> float:
        if not model:
            return 0.0
        best = self.entry(model)
        if best is None:
            return 0.0
        pin, pout = self.prices[best]
        return (input_tokens * pin + output_tokens * pout) / 1_000_000
