"""Run specs validate themselves, serialise to env.json and back, and name their differences."""

import dataclasses
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.errors import UsageError
from h2dlab.measure import strategies
from h2dlab.measure.spec import (
    DEFAULT_SIZES,
    MAX_PAUSE_MS,
    MAX_PLAN_ROWS,
    ORDERS,
    SEED_RANGE,
    ForumSpec,
    OverlapSpec,
    SweepSpec,
    differences,
    spec_from_dict,
)
from h2dlab.units import fmt_bytes, parse_size, parse_sizes


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"strategies": ("teleport",)}, "unknown strategy 'teleport'"),
        ({"strategies": ()}, "no strategy"),
        ({"sizes": ()}, "no sizes"),
        ({"sizes": (0,)}, "at least 1"),
        ({"sizes": (1.5,)}, "whole number"),
        ({"reps": 0}, "reps must be at least 1"),
        ({"warmup": -1}, "warmup must be at least 0"),
        ({"reps_large": 0}, "reps_large must be at least 1"),
        ({"order": "random"}, "order must be one of shuffled, ascending, interleaved"),
        ({"dtype": "float128"}, "unknown dtype"),
        ({"sizes": (1023,), "dtype": "float32"}, "not a multiple of float32's 4 bytes"),
        ({"device": "tpu"}, "unknown device"),
        ({"device": "cuda:x"}, "unknown device"),
        ({"reps": True}, "whole number"),
    ],
)
def test_sweep_spec_rejects(kwargs, needle):
    with pytest.raises(UsageError, match=needle) as info:
        SweepSpec(**kwargs)
    assert isinstance(info.value, ValueError)  # library terms: a ValueError
    assert "--" not in str(info.value)  # no command-line flags in library messages


def test_sweep_spec_defaults_and_coercion():
    s = SweepSpec(strategies=["pageable"], sizes=[1024, 2048], dtype="torch.float16", empty_cache=1)
    assert s.strategies == ("pageable",) and s.sizes == (1024, 2048)
    assert s.dtype == "float16" and s.empty_cache is True
    assert SweepSpec().sizes == DEFAULT_SIZES == tuple(2**k for k in range(10, 27))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.reps = 3


def test_sweep_spec_dict_keeps_the_recorded_keys():
    """env.json's spec keeps the keys recorded runs have (and model.py reads)."""
    s = SweepSpec(("pageable",), (1024,), device="cpu").resolved("cpu", [])
    d = s.to_dict()
    assert d == {
        "kind": "sweep",
        "strategies": ["pageable"],
        "sizes": [1024],
        "device": "cpu",
        "reps": 10,
        "warmup": 2,
        "reps_large": None,
        "order": "shuffled",
        "seed": 0,
        "empty_cache": False,
        "empty_host_cache_each_size": False,
        "dtype": "uint8",
        "evidence": "light",
    }


def test_a_spec_recorded_before_light_evidence_reads_back_as_full():
    """Runs before schema 6 read every piece of evidence around each copy: their spec has no
    ``evidence`` key, reads as full, and a light run does not resume them."""
    old = {"kind": "sweep", "strategies": ["pageable"], "sizes": [1024], "device": "cpu"}
    spec = spec_from_dict(old)
    assert spec.evidence == "full" and "evidence" not in spec.to_dict()
    now = SweepSpec(("pageable",), (1024,), device="cpu").to_dict()
    assert "evidence was None, now 'light'" in differences(spec.to_dict(), now)


def test_recorded_spec_reads_back():
    from h2dlab.recording import datasets

    env = datasets.load("h200_sweep").attrs["envs"]
    for e in env.values():
        spec = spec_from_dict(e["spec"])
        assert isinstance(spec, SweepSpec)
        assert spec.to_dict() == e["spec"]


def test_resolved_fills_strategies_only_when_none():
    assert SweepSpec(device="cpu").resolved("cpu", ["pageable"]).strategies == ("pageable",)
    assert SweepSpec(("staged",), device="cpu").resolved("cpu", ["pageable"]).strategies == ("staged",)


@settings(max_examples=60, deadline=None)
@given(
    names=st.lists(st.sampled_from(sorted(strategies.REGISTRY)), min_size=1, max_size=4, unique=True),
    sizes=st.lists(st.integers(1, 2**12).map(lambda k: 16 * k), min_size=1, max_size=5, unique=True),
    reps=st.integers(1, 50),
    warmup=st.integers(0, 5),
    reps_large=st.none() | st.integers(1, 9),
    order=st.sampled_from(ORDERS),
    seed=st.integers(-(2**31), 2**31),
    flags=st.tuples(st.booleans(), st.booleans()),
    dtype=st.sampled_from(["uint8", "float16", "float32", "bfloat16"]),
    pause=st.none() | st.floats(0, 1000),
)
def test_sweep_spec_round_trips_through_json(
    names, sizes, reps, warmup, reps_large, order, seed, flags, dtype, pause
):
    s = SweepSpec(
        tuple(names),
        tuple(sizes),
        "cuda:1",
        reps,
        warmup,
        reps_large,
        order,
        seed,
        flags[0],
        flags[1],
        dtype,
        pause,
    )
    d = json.loads(json.dumps(s.to_dict()))
    assert spec_from_dict(d) == s
    assert differences(d, s.to_dict()) == []


def test_differences_name_each_changed_field():
    a = SweepSpec(("pageable",), (1024,), device="cpu", reps=150).to_dict()
    b = SweepSpec(("pageable",), (1024,), device="cpu", reps=9, seed=2).to_dict()
    assert differences(a, b) == ["reps was 150, now 9", "seed was 0, now 2"]
    assert differences(a, a) == []


def test_forum_and_overlap_specs():
    assert ForumSpec().to_dict() == {
        "kind": "forum",
        "order": "ascending",
        "seed": 0,
        "seqs": "forum",
        "device": "cuda",
    }
    assert spec_from_dict(ForumSpec(seqs=[1, 6]).to_dict()) == ForumSpec(seqs=(1, 6))
    assert spec_from_dict(ForumSpec().to_dict()) == ForumSpec()
    with pytest.raises(UsageError, match="order must be one of ascending, shuffled"):
        ForumSpec(order="interleaved")
    with pytest.raises(UsageError, match="seq"):
        ForumSpec(seqs=(0,))
    assert OverlapSpec().to_dict() == {"kind": "overlap", "size_bytes": 256 * 2**20, "reps": 5}
    with pytest.raises(UsageError, match="reps"):
        OverlapSpec(reps=0)
    with pytest.raises(UsageError, match="known kind"):
        spec_from_dict({"kind": "teleport"})


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 2**45))
def test_fmt_bytes_picks_the_unit_and_rounds_to_two_places(n):
    num, unit = fmt_bytes(n).split()
    mult = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]
    assert 1 <= float(num) < 1024 or unit == "GiB"
    # half a unit in the last printed place, plus float noise (16256 B = 15.875 KiB prints 15.88:
    # 15.88 * 1024 - 16256 is 5.12 in exact arithmetic, 5.1200000000008 in floats)
    assert abs(float(num) * mult - n) <= 0.005 * mult * (1 + 1e-9)
    if n % mult == 0:
        assert num == str(n // mult) and parse_size(num + unit) == n


@settings(max_examples=100, deadline=None)
@given(lo=st.integers(0, 30), span=st.integers(0, 10))
def test_parse_sizes_power_of_two_range(lo, span):
    sizes = parse_sizes(f"{2**lo}..{2 ** (lo + span)}")
    assert sizes == [2**k for k in range(lo, lo + span + 1)]


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 2**45) | st.floats(0, 2**45, allow_nan=False))
def test_compact_fmt_bytes_is_the_axis_label(n):
    """The compact style is what the axis labels and the advice prose have always printed."""

    def label(n):  # the formatter plots.size_label and advice.size_text each carried
        for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if n >= div:
                return f"{n / div:g} {unit}"
        return f"{n:g} B"

    assert fmt_bytes(n, compact=True) == label(n)


def test_fmt_bytes_examples():
    assert fmt_bytes(1536) == "1.50 KiB" and fmt_bytes(1536, compact=True) == "1.5 KiB"
    assert fmt_bytes(2**26) == "64 MiB" == fmt_bytes(2**26, compact=True)
    assert fmt_bytes(512) == "512 B" and fmt_bytes(3 * 2**30) == "3 GiB"
    # two places that round up to the next unit print in it (was '1024.00 MiB'); bytes never round
    assert fmt_bytes(1_073_736_582) == "1.00 GiB" and fmt_bytes(1_073_736_000) == "1023.99 MiB"
    assert fmt_bytes(2**20 - 5) == "1.00 MiB" and fmt_bytes(1023) == "1023 B"


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"seqs": ()}, "seqs, when given, must name at least one seq"),
        ({"seqs": (0,)}, "a seq must be at least 1, got 0"),
        ({"seqs": (3, 5, 3)}, "seqs name a seq twice: each seq is measured once"),
        ({"device": "cpu:0"}, "unknown device 'cpu:0': use cpu, cuda or cuda:N"),
        ({"seed": 2**64}, "seed 18446744073709551616 does not fit in 64 bits"),
    ],
)
def test_forum_spec_refuses_with_the_whole_message(kwargs, message):
    with pytest.raises(UsageError) as info:
        ForumSpec(**kwargs)
    assert str(info.value).startswith(message)


def test_forum_spec_keeps_seqs_as_a_tuple_and_the_device_as_text():
    s = ForumSpec(seqs=[5, 2], device=torch.device("cuda", 1))
    assert s.seqs == (5, 2) and type(s.seqs) is tuple
    assert s.device == "cuda:1" and type(s.device) is str
    assert s.to_dict() == {
        "kind": "forum",
        "order": "ascending",
        "seed": 0,
        "seqs": [5, 2],
        "device": "cuda:1",
    }
    assert s.resolved(torch.device("cuda", 0)) == ForumSpec(seqs=(5, 2), device="cuda:0")


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"size_bytes": 0}, "size_bytes must be at least 1, got 0"),
        ({"size_bytes": 2.0}, "size_bytes must be a whole number, not 2.0"),
        ({"reps": 0}, "reps must be at least 1, got 0"),
        ({"reps": 100_001}, "reps must be at most 100000, got 100001"),
        ({"device": "tpu"}, "unknown device 'tpu'"),
    ],
)
def test_overlap_spec_refuses_with_the_whole_message(kwargs, message):
    with pytest.raises(UsageError) as info:
        OverlapSpec(**kwargs)
    assert str(info.value).startswith(message)


def test_overlap_spec_takes_its_bounds_and_keeps_the_device_as_text():
    low = OverlapSpec(size_bytes=1, reps=1, device=torch.device("cuda", 0))
    assert (low.size_bytes, low.reps, low.device) == (1, 1, "cuda:0") and type(low.device) is str
    assert OverlapSpec(reps=100_000).reps == 100_000


@pytest.mark.parametrize("d,shown", [({"kind": "timeline"}, "'timeline'"), ({}, "None")])
def test_spec_from_dict_names_the_kind_it_does_not_know(d, shown):
    with pytest.raises(UsageError) as info:
        spec_from_dict(d)
    assert str(info.value) == f"not a run spec of a known kind: {shown}"


def test_planned_rows_and_estimated_hours():
    """Copies per size: warm-ups plus reps (reps_large from 1 GiB on); every copy at
    FLOOR_GBPS = 1 GB/s plus 10 us."""
    s = SweepSpec(("pageable", "staged"), (2**30 - 64, 2**30), device="cpu", reps=10, warmup=1, reps_large=2)
    assert s.planned_rows() == 2 * (11 + 3)
    assert s.planned_rows(5) == 5 * (11 + 3)
    one = 11 * ((2**30 - 64) / 1e9 + 1e-5) + 3 * (2**30 / 1e9 + 1e-5)
    assert s.estimated_hours() == pytest.approx(2 * one / 3600, rel=1e-12)
    assert s.estimated_hours(3) == pytest.approx(3 * one / 3600, rel=1e-12)
    every = len(strategies.names())
    assert SweepSpec(sizes=(1024,), device="cpu", reps=1, warmup=0).planned_rows() == every
    unnamed = SweepSpec(sizes=(10**9,), device="cpu", reps=1, warmup=0)
    assert unnamed.estimated_hours() == pytest.approx(every * (1.0 + 1e-5) / 3600, rel=1e-12)


EVERY = ", ".join(strategies.names(None))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"strategies": ()}, f"no strategy given: choose from {EVERY}"),
        ({"strategies": ("teleport",)}, f"unknown strategy 'teleport': choose from {EVERY}"),
        (
            {"strategies": ("pageable", "staged", "pageable")},
            "strategy 'pageable' is named twice: each strategy is measured once per size",
        ),
        ({"sizes": ()}, "no sizes given"),
        ({"sizes": (1024, 0)}, "a size must be at least 1, got 0"),
        ({"sizes": (1024, 1.5)}, "a size must be a whole number, not 1.5"),
        ({"sizes": (1024, 2048, 1024)}, "size 1024 is given twice: each size is one cell of the plan"),
        ({"sizes": (4096, 1024, 4096, 1024)}, "size 1024 is given twice: each size is one cell of the plan"),
        ({"seed": 1.5}, "seed must be a whole number, not 1.5"),
        ({"seed": True}, "seed must be a whole number, not True"),
        (
            {"dtype": "bool"},
            "dtype bool is not measured (random bytes are not valid booleans): use uint8, the same 1 byte each",
        ),
        ({"dtype": "qint8"}, "dtype 'qint8' has no plain copy in torch: use e.g. uint8, float16, float32"),
        ({"dtype": "int4"}, "dtype 'int4' has no plain copy in torch: use e.g. uint8, float16, float32"),
    ],
)
def test_sweep_spec_refuses_with_the_whole_message(kwargs, message):
    with pytest.raises(UsageError) as info:
        SweepSpec(**{"device": "cpu", **kwargs})
    assert str(info.value) == message


def test_seed_takes_both_ends_of_its_64_bit_range():
    lo, hi = SEED_RANGE
    assert (lo, hi) == (-(2**63), 2**64 - 1)
    assert SweepSpec(sizes=(1024,), device="cpu", seed=lo).seed == lo
    assert SweepSpec(sizes=(1024,), device="cpu", seed=hi).seed == hi
    for bad in (lo - 1, hi + 1):
        with pytest.raises(UsageError, match=f"seed {bad} does not fit in 64 bits"):
            SweepSpec(sizes=(1024,), device="cpu", seed=bad)


def test_plan_of_exactly_max_plan_rows_is_made_and_one_more_is_refused():
    at = SweepSpec(("pageable",), (10**9,), device="cpu", reps=MAX_PLAN_ROWS - 2, warmup=2)
    assert at.planned_rows() == MAX_PLAN_ROWS == 10_000_000
    with pytest.raises(UsageError) as info:
        SweepSpec(("pageable",), (10**9,), device="cpu", reps=MAX_PLAN_ROWS - 1, warmup=2)
    # 10,000,001 copies of 1 GB at 1 GB/s plus 10 us each: 2777.8 hours
    assert str(info.value) == (
        "this plan would time 10,000,001 copies (about 2,778 hours at 1 GB/s); "
        "at most 10,000,000 fit in one run: lower reps or sizes"
    )


def test_sweep_spec_keeps_the_device_as_text_and_the_flags_as_bools():
    s = SweepSpec(
        ("pageable",),
        (1024,),
        device=torch.device("cuda", 1),
        empty_cache=1,
        empty_host_cache_each_size=1,
    )
    assert s.device == "cuda:1" and type(s.device) is str
    assert s.empty_cache is True and s.empty_host_cache_each_size is True
    off = SweepSpec(("pageable",), (1024,), device="cpu", empty_cache=0, empty_host_cache_each_size=0)
    assert off.empty_cache is False and off.empty_host_cache_each_size is False


def test_resolved_sets_the_device():
    s = SweepSpec(("pageable",), (1024,), device="cuda").resolved(torch.device("cuda", 0), ["staged"])
    assert s == SweepSpec(("pageable",), (1024,), device="cuda:0")
    assert type(s.device) is str


def test_unresolved_sweep_spec_dict_names_no_strategies():
    s = SweepSpec(sizes=(1024,), device="cpu")
    d = s.to_dict()
    assert d["strategies"] is None and d["sizes"] == [1024]
    assert spec_from_dict(d) == s


def test_differences_name_a_key_only_one_side_has():
    """A spec recorded before a field existed still differs from one that has it."""
    old = {"kind": "sweep", "reps": 3}
    new = {"kind": "sweep", "reps": 3, "dtype": "uint8"}
    assert differences(old, new) == ["dtype was None, now 'uint8'"]
    assert differences(new, old) == ["dtype was 'uint8', now None"]


@pytest.mark.parametrize("device", ["cuda:\u0663", "cuda:\u00b2", "cuda:1_0"])
def test_a_device_index_is_ascii_digits(device):
    """str.isdigit() takes other scripts' digits and superscripts; torch does not."""
    with pytest.raises(UsageError, match="unknown device"):
        SweepSpec(("pageable",), (1024,), device=device)


@pytest.mark.parametrize(
    "pause,message",
    [
        (-0.001, "pause_ms must be from 0 to 1000 milliseconds, got -0.001"),
        (1000.5, "pause_ms must be from 0 to 1000 milliseconds, got 1000.5"),
        (float("nan"), "pause_ms must be from 0 to 1000 milliseconds, got nan"),
        (float("inf"), "pause_ms must be from 0 to 1000 milliseconds, got inf"),
        ("3", "pause_ms must be a number of milliseconds, not '3'"),
        (True, "pause_ms must be a number of milliseconds, not True"),
    ],
)
def test_pause_is_refused_outside_0_to_1000_ms_with_the_whole_message(pause, message):
    with pytest.raises(UsageError) as info:
        SweepSpec(("pageable",), (1024,), device="cpu", pause_ms=pause)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_pause_takes_both_ends_of_its_range_as_a_float():
    assert MAX_PAUSE_MS == 1000
    for ok in (0, 1000, 2.5):
        s = SweepSpec(("pageable",), (1024,), device="cpu", pause_ms=ok)
        assert s.pause_ms == float(ok) and type(s.pause_ms) is float
        assert s.to_dict()["pause_ms"] == float(ok)
        assert spec_from_dict(json.loads(json.dumps(s.to_dict()))) == s
    assert SweepSpec(("pageable",), (1024,), device="cpu").pause_ms is None


def test_no_pause_leaves_the_spec_dict_as_recorded_before_it_existed():
    """``pause_ms=None`` is left out of env.json's spec, so specs recorded before the
    field existed still equal (resume, hashes) a spec made today without a pause."""
    s = SweepSpec(("pageable",), (1024,), device="cpu")
    assert "pause_ms" not in s.to_dict()
    recorded = {k: v for k, v in s.to_dict().items()}
    assert differences(recorded, s.to_dict()) == []
    paused = SweepSpec(("pageable",), (1024,), device="cpu", pause_ms=3).to_dict()
    assert differences(recorded, paused) == ["pause_ms was None, now 3.0"]
    assert differences(paused, SweepSpec(("pageable",), (1024,), device="cpu", pause_ms=0).to_dict()) == [
        "pause_ms was 3.0, now 0.0"
    ]


def test_a_pause_adds_to_the_estimated_hours_per_copy():
    base = SweepSpec(("pageable",), (10**6,), device="cpu", reps=8, warmup=2)
    paused = SweepSpec(("pageable",), (10**6,), device="cpu", reps=8, warmup=2, pause_ms=250)
    assert paused.estimated_hours() - base.estimated_hours() == pytest.approx(10 * 0.25 / 3600, rel=1e-9)
    assert SweepSpec(
        ("pageable",), (10**6,), device="cpu", reps=8, warmup=2, pause_ms=0
    ).estimated_hours() == (base.estimated_hours())
