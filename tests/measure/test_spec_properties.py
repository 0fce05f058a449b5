"""Properties (hypothesis) of what must be exactly right: reading sizes, validating specs,
and resuming a run interrupted at any row."""

import math
import string
from decimal import Decimal

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h2dlab.errors import UsageError
from h2dlab.measure import strategies
from h2dlab.measure.harness import sweep
from h2dlab.measure.plan import plan_spec
from h2dlab.measure.recorder import StopFlag
from h2dlab.measure.spec import MAX_PLAN_ROWS, ORDERS, SEED_RANGE, SweepSpec, spec_from_dict
from h2dlab.recording import datasets
from h2dlab.recording.partial import partial_path
from h2dlab.units import UNITS, parse_size, parse_sizes

UNIT_NAMES = sorted(UNITS, key=len)
CASED = st.sampled_from(UNIT_NAMES).flatmap(
    lambda u: st.tuples(st.just(u), st.sampled_from([u, u.upper(), u.capitalize()]))
)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 10**30), unit=CASED)
def test_whole_sizes_read_back_exactly(n, unit):
    """Any whole number with any unit, any case: exactly n * unit bytes (no float rounding)."""
    key, written = unit
    assert parse_size(f"{n}{written}") == n * UNITS[key]
    assert parse_size(f" {n} {written} ") == n * UNITS[key]


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 10**15), places=st.integers(1, 6), unit=st.sampled_from(UNIT_NAMES))
def test_decimal_sizes_are_exact_or_refused(n, places, unit):
    text = str(Decimal(n).scaleb(-places))
    exact = Decimal(n).scaleb(-places) * UNITS[unit]
    if exact == exact.to_integral_value():
        assert parse_size(text + unit) == int(exact)
    else:
        with pytest.raises(UsageError, match="whole number of bytes"):
            parse_size(text + unit)


@settings(max_examples=500, deadline=None)
@given(text=st.text(st.characters(codec="utf-8"), max_size=30) | st.text(string.printable, max_size=12))
def test_any_text_is_a_positive_size_or_a_value_error(text):
    """Never another exception, never zero or a negative number of bytes."""
    try:
        n = parse_size(text)
    except ValueError as exc:
        assert str(exc).startswith(("cannot read size", "size ")), exc  # names what was wrong
    else:
        assert isinstance(n, int) and n >= 1


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 2**40), min_size=1, max_size=8))
def test_size_lists_are_sorted_unique_and_round_trip(sizes):
    assert parse_sizes(",".join(map(str, sizes))) == sorted(set(sizes))
    assert parse_sizes(",".join(f"{s}B" for s in reversed(sizes))) == sorted(set(sizes))


@settings(max_examples=200, deadline=None)
@given(lo=st.integers(1, 2**40), span=st.integers(0, 2**40))
def test_a_range_holds_its_ends_and_every_power_of_two_between(lo, span):
    hi = lo + span
    got = parse_sizes(f"{lo}..{hi}")
    want = {lo} | {2**k for k in range(0, 42) if lo <= 2**k <= hi}
    if hi & (hi - 1) == 0:
        want.add(hi)
    assert got == sorted(want)
    assert min(got) == lo and max(got) <= hi


NAMES = sorted(strategies.REGISTRY)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(st.sampled_from(NAMES), min_size=0, max_size=5),
    sizes=st.lists(st.integers(-3, 2**20), min_size=0, max_size=4),
    reps=st.integers(-2, 10**8),
    warmup=st.integers(-2, 5),
    reps_large=st.none() | st.integers(-1, 5),
    order=st.sampled_from([*ORDERS, "random"]),
    seed=st.integers(-(2**65), 2**65),
    dtype=st.sampled_from(["uint8", "float16", "float32", "bool", "int4", "complex64", "nope"]),
)
def test_a_spec_is_valid_exactly_when_each_field_is(
    names, sizes, reps, warmup, reps_large, order, seed, dtype
):
    """Either the spec is made, and every rule holds and it round-trips, or it is refused
    with a ValueError; never another exception, never a spec that breaks a rule."""
    item = {"uint8": 1, "float16": 2, "float32": 4, "complex64": 8}.get(dtype)
    ok = (
        len(names) >= 1
        and len(set(names)) == len(names)
        and len(sizes) >= 1
        and len(set(sizes)) == len(sizes)
        and min(sizes) >= 1
        and reps >= 1
        and warmup >= 0
        and (reps_large is None or reps_large >= 1)
        and order in ORDERS
        and SEED_RANGE[0] <= seed <= SEED_RANGE[1]
        and item is not None
        and all(n % item == 0 for n in sizes)
        and len(names) * len(sizes) * (reps + warmup) <= MAX_PLAN_ROWS
    )
    kw = dict(
        strategies=tuple(names),
        sizes=tuple(sizes),
        device="cpu",
        reps=reps,
        warmup=warmup,
        reps_large=reps_large,
        order=order,
        seed=seed,
        dtype=dtype,
    )
    if not ok:
        with pytest.raises(ValueError):
            SweepSpec(**kw)
        return
    spec = SweepSpec(**kw)
    assert spec_from_dict(spec.to_dict()) == spec
    assert spec.planned_rows() == len(plan_spec(spec))


class _StopAfter:
    """A host clock that asks for a stop once ``rows`` copies were timed (two reads each)."""

    def __init__(self, stop, rows):
        self.stop, self.reads, self.rows = stop, 0, rows

    def __call__(self):
        import time

        self.reads += 1
        if self.reads >= 2 * self.rows:
            self.stop.request()
        return time.perf_counter()


RESUME_SPEC = SweepSpec(
    ("pageable", "pageable_non_blocking"), (1024, 4096, 8192), device="cpu", reps=2, warmup=1, seed=11
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cut=st.integers(1, len(plan_spec(RESUME_SPEC.resolved("cpu", []))) - 1),
    torn=st.binary(max_size=40).filter(lambda b: b"\n" not in b),
    killed=st.booleans(),
    order=st.sampled_from(ORDERS),
)
def test_resume_after_any_interruption_finishes_the_plan(tmp_path_factory, cut, torn, killed, order):
    """Stopped at any row (by a signal, or killed with a torn last line), a resume ends
    with the table an uninterrupted run would have: every planned row once, in order,
    one run id, the first part's rows untouched."""
    import dataclasses

    spec = dataclasses.replace(RESUME_SPEC, order=order)
    out = tmp_path_factory.mktemp("resume") / "r.csv"
    stop = StopFlag()
    first = sweep(spec, out=out, progress=False, stop=stop, clock=_StopAfter(stop, cut))
    assert first.attrs["stopped"] and 1 <= len(first) <= cut + 1
    if killed:  # as if killed before the final save: only the partial file remains
        text = first.reindex(columns=list(datasets.COLUMNS)).to_csv(index=False)
        partial_path(out).write_bytes(text.encode() + torn)
        datasets.write_env(first.attrs["env"], datasets.env_path(partial_path(out)))
        out.unlink()
    done = sweep(spec, out=out, resume=True, progress=False)
    planned = plan_spec(spec)
    back = datasets.read(out)
    key = ["order", "strategy", "size_bytes", "rep", "warmup"]
    assert back[key].to_dict("records") == [{k: p[k] for k in key} for p in planned]
    assert back["run_id"].nunique() == 1 and len(done) == len(planned)
    pd.testing.assert_frame_equal(back.head(len(first)), first.reset_index(drop=True), check_dtype=False)
    assert not partial_path(out).exists() and math.isfinite(back["t_s"].max())
