"""Cost of one model call from the ``genai-prices`` table, without a full table walk per call.

``genai_prices.calc_price`` resolves the model, then decomposes the usage into every priced
unit of the registry; on the writer's apply path that was a large share of a drain's time
(bench/RESULTS.md). Two facts of the table make it
cacheable without changing a single result:

* **the lookup** ``(model, provider) → (ModelInfo, Provider)`` depends only on the bundled
  table, i.e. on ``price_version()``; a miss (``LookupError``) is as stable as a hit;
* **the price** of a call with token counts ``t = (input, cache_read, cache_write, output)``
  (``input`` includes the cache tokens, the package's convention) is, for one ``ModelPrice``
  (one time window of the model's prices), *affine in t within a tier band*: every priced
  unit costs ``price × count / per`` where each unit's count is a difference of the four
  counts, and a ``TieredPrices`` picks its rate by ``input > tier.start`` for the *whole*
  call (genai_prices.types.calc_unit_price). So for band ``k`` (the number of tier starts
  below ``input``) ``cost(t) = c0 + c_in·input + c_cr·cache_read + c_cw·cache_write +
  c_out·output``.

The coefficients are read off the package itself: five ``genai_prices.calc_price`` calls at
points inside the band (``input = b`` and ``b + 1``, then one cache-read, cache-write and
output token more; ``c0`` is the per-request part). Every price is a short decimal and every
``per`` a power of ten (tokens: per million), so both the package's sum and this one are
exact ``Decimal`` values of the same affine function, hence the same float. Where a band is
too narrow to probe (width < 2 tokens) the full ``calc_price`` runs. tests/test_pricing.py
compares the two for every model of the table, both tier sides and random counts.
"""

from __future__ import annotations

import datetime as dt
import functools
from decimal import Decimal
from typing import Any

__all__ = ["LITELLM", "price", "price_version"]

#: The provider id under which genai-prices reads a model id ``<provider>/<model>`` the way
#: LiteLLM writes them (``openai/gpt-4o``, ``bedrock/…``, ``vertex_ai/…``), mapping LiteLLM's
#: provider names to its own: a model id with a ``/`` that misses as given is looked up so.
LITELLM = "litellm"

_NO_TOKENS = {
    "input_tokens": 0,
    "cache_read_tokens": 0,
    "cache_write_tokens": 0,
    "output_tokens": 0,
}


@functools.lru_cache(maxsize=1)
def price_version() -> str:
    """``genai-prices==<version>``: the price table a cost was computed with."""
    from importlib import metadata  # here, not at import: it costs the producer path (bench/cli.py)

    return f"genai-prices=={metadata.version('genai-prices')}"


def _usage(tokens: dict[str, int]) -> Any:
    import genai_prices  # noqa: PLC0415  (lazy: ~0.7 s, and only the writer prices)

    return genai_prices.Usage(
        input_tokens=tokens["input_tokens"],
        output_tokens=tokens["output_tokens"],
        cache_read_tokens=tokens["cache_read_tokens"],
        cache_write_tokens=tokens["cache_write_tokens"],
    )


def _calc(tokens: dict[str, int], model: str, provider: str | None, when: dt.datetime) -> Decimal:
    """The package's own price of one call (raises ``LookupError`` for an unknown model)."""
    import genai_prices  # noqa: PLC0415

    return genai_prices.calc_price(
        _usage(tokens), model, provider_id=provider, genai_request_timestamp=when
    ).total_price


@functools.lru_cache(maxsize=1024)
def _lookup(model: str, provider: str | None, version: str) -> Any:
    """``ModelInfo`` of ``model`` at ``provider`` (the lookup ``calc_price`` does), or None.
    ``version`` (``price_version()``) is part of the key: a cached answer is one table's."""
    from genai_prices import data_snapshot  # noqa: PLC0415

    try:
        return data_snapshot.get_snapshot().find_provider_model(model, None, provider, None)[1]
    except LookupError:  # the package's "no such model/provider" error
        return None


def _tier_starts(model_price: Any) -> tuple[int, ...]:
    """Sorted distinct ``start`` thresholds of the tiered prices of one ``ModelPrice``."""
    from genai_prices.types import TieredPrices  # noqa: PLC0415

    return tuple(
        sorted(
            {
                t.start
                for v in vars(model_price).values()
                if isinstance(v, TieredPrices)
                for t in v.tiers
            }
        )
    )


def _window(info: Any, model_price: Any) -> int:
    """Which of the model's price windows ``model_price`` is (-1: the model has one)."""
    if not isinstance(info.prices, list):
        return -1
    return next(i for i, c in enumerate(info.prices) if c.prices is model_price)


def _window_price(info: Any, window: int) -> Any:
    return info.prices if window < 0 else info.prices[window].prices


@functools.lru_cache(maxsize=4096)
def _coefficients(
    model: str, provider: str | None, version: str, window: int, band: int
) -> tuple[Decimal, ...] | None:
    """``(c0, c_in, c_cr, c_cw, c_out)`` of tier band ``band`` of price window ``window`` of
    the model (module doc), or None when the band is narrower than the probes need.

    The probes call ``ModelPrice.calc_price`` of that window: what ``calc_price`` runs once
    the window is chosen (``ModelInfo.calc_price`` adjusts only Groq Whisper's audio seconds,
    which a token usage does not have)."""
    return _band_coefficients(_window_price(_lookup(model, provider, version), window), band)


def _band_coefficients(model_price: Any, band: int) -> tuple[Decimal, ...] | None:
    """The coefficients of ``_coefficients`` for one ``ModelPrice`` (uncached)."""
    starts = _tier_starts(model_price)
    low = starts[band - 1] + 1 if band else 0
    base = max(low, 1)  # one cache token needs one input token
    if band < len(starts) and base + 1 > starts[band]:
        return None

    def at(**extra: int) -> Decimal:
        return model_price.calc_price(_usage(dict(_NO_TOKENS, input_tokens=base) | extra))[
            "total_price"
        ]

    p = at()
    c_in = at(input_tokens=base + 1) - p
    c_cr = at(cache_read_tokens=1) - p
    c_cw = at(cache_write_tokens=1) - p
    c_out = at(output_tokens=1) - p
    return p - c_in * base, c_in, c_cr, c_cw, c_out


def price(
    tokens: dict[str, int], model: str | None, provider: str | None, ts: float
) -> float | None:
    """Cost in USD of one call at time ``ts`` (epoch s), or None when the price table has no
    price for ``model`` (at ``provider`` when given; a ``provider/model`` id is also tried as
    LiteLLM writes it, ``LITELLM``): unpriced, never 0.

    ``tokens``: normalised counts (``usage.normalize_usage``). Equal to
    ``float(genai_prices.calc_price(...).total_price)`` for the same arguments (module doc).
    """
    if not model:
        return None
    provider = provider or None
    version = price_version()
    info = _lookup(model, provider, version)
    if info is None and "/" in model and provider != LITELLM:
        # A LiteLLM-style id (``openai/gpt-4o``, ``bedrock/anthropic.claude-…``): the table
        # reads its prefix as the provider itself when asked as LiteLLM's.
        provider = LITELLM
        info = _lookup(model, provider, version)
    if info is None:
        return None
    when = dt.datetime.fromtimestamp(ts, tz=dt.UTC)
    model_price = info.get_prices(when)
    n_in = tokens["input_tokens"]
    band = sum(n_in > s for s in _tier_starts(model_price))
    coef = _coefficients(model, provider, version, _window(info, model_price), band)
    if coef is None:
        return float(_calc(tokens, model, provider, when))
    c0, c_in, c_cr, c_cw, c_out = coef
    return float(
        c0
        + c_in * n_in
        + c_cr * tokens["cache_read_tokens"]
        + c_cw * tokens["cache_write_tokens"]
        + c_out * tokens["output_tokens"]
    )
