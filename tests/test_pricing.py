"""store/apply/pricing.py prices a call to exactly the figure ``genai_prices.calc_price`` gives
(module doc: the cached lookup and the per-band affine form), for every model of the bundled
table, on both sides of every tier threshold, at every price window's time, and for unknown
models (unpriced, None). No mocks: the package's own table on both sides."""

from __future__ import annotations

import datetime as dt
import random

import genai_prices
import pytest
from genai_prices import data_snapshot

from quill.store.apply import pricing
from quill.store.apply.usage import price


def _reference(tokens, model, provider, ts):
    usage = genai_prices.Usage(
        **{
            k: tokens[k]
            for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
        }
    )
    when = dt.datetime.fromtimestamp(ts, tz=dt.UTC)
    try:
        return float(
            genai_prices.calc_price(
                usage, model, provider_id=provider, genai_request_timestamp=when
            ).total_price
        )
    except LookupError:
        return None


def _token_cases(rng, starts):
    """Counts around every tier start (both sides, and the band edges) plus random ones."""
    inputs = {0, 1, 2, 3, 1000, 123_457, 2_000_000}
    for s in starts:
        inputs |= {s - 1, s, s + 1, s + 2}
    for n_in in sorted(i for i in inputs if i >= 0):
        for _ in range(2):
            cr = rng.randint(0, n_in)
            cw = rng.randint(0, n_in - cr)
            yield {
                "input_tokens": n_in,
                "cache_read_tokens": cr,
                "cache_write_tokens": cw,
                "output_tokens": rng.choice((0, 1, rng.randint(0, 200_000))),
                "reasoning_tokens": 0,
            }


def _window_times(info):
    """A time inside each of the model's price windows (start dates and times of day)."""
    now = dt.datetime(2026, 6, 1, 12, tzinfo=dt.UTC).timestamp()
    times = {now, now + 16 * 3600}
    for cond in info.prices if isinstance(info.prices, list) else ():
        start = getattr(cond.constraint, "start_date", None)
        if isinstance(start, dt.datetime):
            times |= {start.timestamp() + 1, start.timestamp() - 1}
        elif isinstance(start, dt.date):
            t = dt.datetime(start.year, start.month, start.day, tzinfo=dt.UTC).timestamp()
            times |= {t + 1, t - 1}
    return sorted(times)


@pytest.mark.parametrize("provider", data_snapshot.get_snapshot().providers, ids=lambda p: p.id)
def test_every_model_prices_exactly_as_genai_prices(provider):
    checked = 0
    for info in provider.models:
        rng = random.Random(info.id)
        for ts in _window_times(info):
            mp = info.get_prices(dt.datetime.fromtimestamp(ts, tz=dt.UTC))
            for tokens in _token_cases(rng, pricing._tier_starts(mp)):
                want = _reference(tokens, info.id, provider.id, ts)
                assert price(tokens, info.id, provider.id, ts) == want, (
                    info.id,
                    provider.id,
                    ts,
                    tokens,
                )
                checked += 1
    assert checked or not provider.models


def test_a_model_without_provider_resolves_like_genai_prices():
    rng = random.Random(7)
    ts = dt.datetime(2026, 6, 1, tzinfo=dt.UTC).timestamp()
    for model in (
        "claude-sonnet-4-5-20250929",
        "claude-sonnet-4-20250514",
        "gpt-4o",
        "gpt-4.1-mini",
        "gemini-2.5-pro",
        "claude-opus-4-1-20250805",
    ):
        for tokens in _token_cases(rng, (200_000, 128_000)):
            assert price(tokens, model, None, ts) == _reference(tokens, model, None, ts), (
                model,
                tokens,
            )


@pytest.mark.parametrize(
    "model, provider, bare",
    [
        ("openai/gpt-4o", None, ("gpt-4o", "openai")),
        ("anthropic/claude-3-5-sonnet-20241022", None, ("claude-3-5-sonnet-20241022", None)),
        ("openai/gpt-4o", "openai", ("gpt-4o", "openai")),  # the provider said twice
        ("gemini/gemini-2.5-pro", None, ("gemini-2.5-pro", "google")),
        ("bedrock/anthropic.claude-3-sonnet-20240229-v1:0", None, None),
        ("xai/grok-2", None, None),  # LiteLLM's name for the table's x-ai
        ("openrouter/openai/gpt-4o", None, None),
    ],
)
def test_a_litellm_model_id_is_priced_as_genai_prices_reads_litellm(model, provider, bare):
    """LiteLLM writes ``<provider>/<model>``; genai-prices reads that itself when asked as
    LiteLLM (``provider_id="litellm"``, its provider-name mapping): priced to that exact
    figure, and to the bare model's price where the table has both."""
    ts = dt.datetime(2026, 6, 1, tzinfo=dt.UTC).timestamp()
    for tokens in _token_cases(random.Random(11), ()):
        got = price(tokens, model, provider, ts)
        assert got is not None and got == _reference(tokens, model, pricing.LITELLM, ts)
        if bare is not None:
            assert got == _reference(tokens, *bare, ts)
    assert price(tokens, "nosuchprovider/gpt-4o", None, ts) is None
    assert price(tokens, "openai/no-such-model", None, ts) is None


@pytest.mark.parametrize(
    "model, provider",
    [
        ("<synthetic>", None),
        ("no-such-model-xyz", None),
        ("gpt-4o", "no-such-provider"),
        (None, None),
        ("", "openai"),
    ],
)
def test_unknown_model_or_provider_is_unpriced(model, provider):
    tokens = {
        "input_tokens": 10,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 5,
        "reasoning_tokens": 0,
    }
    assert price(tokens, model, provider, 1.78e9) is None
    assert price(tokens, model, provider, 1.78e9) is None  # a cached miss stays a miss


def test_a_narrow_band_has_no_coefficients_and_a_wide_one_prices_exactly():
    """A band narrower than the probes need gets no coefficients (``price`` then runs the full
    ``calc_price``); an open-ended band's coefficients give the package's own figure."""
    from decimal import Decimal

    import genai_prices.types as t

    mp = t.ModelPrice(
        input_mtok=t.TieredPrices(
            base=Decimal(1),
            tiers=[t.Tier(start=5, price=Decimal(2)), t.Tier(start=6, price=Decimal(3))],
        ),
        output_mtok=Decimal(4),
        requests_kcount=Decimal("0.5"),
    )
    assert pricing._tier_starts(mp) == (5, 6)
    assert pricing._band_coefficients(mp, 1) is None  # 5 < input <= 6: one value
    for band, n_in in ((0, 0), (0, 4), (0, 5), (2, 7), (2, 10_000)):
        c0, c_in, c_cr, c_cw, c_out = pricing._band_coefficients(mp, band)
        want = mp.calc_price(genai_prices.Usage(input_tokens=n_in, output_tokens=3))["total_price"]
        assert c0 + c_in * n_in + c_out * 3 == want
