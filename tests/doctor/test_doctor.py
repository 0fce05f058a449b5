"""``h2dlab doctor`` on synthetic Kineto-format traces (tests/synthetic_traces.py): every
number asserted here is built into a synthetic trace, none is a measurement."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synthetic_traces import SyntheticTrace

from h2dlab.cli import main as cli
from h2dlab.doctor import diagnose, trace
from h2dlab.doctor.sites import analyse, parse_copy_name
from h2dlab.doctor.trace import read_trace
from h2dlab.doctor.verdict import Machine
from h2dlab.errors import UsageError

MiB = 2**20
#: a synthetic machine: (overhead_ms, bytes per ms) per strategy, not a measurement
SYNTH = Machine(
    "synthetic",
    "a synthetic machine",
    {
        "pinned_reuse": (0.01, 50e6),
        "pin_then_copy": (0.05, 8e6),
        "pageable": (0.05, 12e6),
        "d2h_pinned_reuse": (0.01, 50e6),
    },
)


def _dx(t: SyntheticTrace, tmp_path, name="synthetic.json.gz"):
    return diagnose(t.write(tmp_path / name), machine=SYNTH)


def _batch_trace(steps=3, src="Pageable", kernel_stream=7, kernel_ms=5.0, copy_us=1000.0, nbytes=64 * MiB):
    t = SyntheticTrace()
    for n in range(steps):
        t0 = n * 20000.0
        t.step(n + 2, t0, 19000)
        t.copy(t0 + 100, t0 + 120, copy_us, nbytes, src=src)
        t.kernel(t0 + 200 + copy_us, kernel_ms * 1e3, stream=kernel_stream)
    return t


# -- reading -----------------------------------------------------------------------------
def test_copy_names_give_direction_and_memory_kinds():
    assert parse_copy_name("Memcpy HtoD (Pageable -> Device)") == ("h2d", "pageable", "device")
    assert parse_copy_name("Memcpy HtoD (Pinned -> Device)") == ("h2d", "pinned", "device")
    assert parse_copy_name("Memcpy DtoH (Device -> Pinned)") == ("d2h", "device", "pinned")
    assert parse_copy_name("Memcpy DtoD (Device -> Device)") == ("d2d", "device", "device")
    assert parse_copy_name("Memcpy HtoD") == ("h2d", "unknown", "unknown")


def test_gzip_plain_and_array_traces_read_the_same(tmp_path):
    t = _batch_trace()
    a = read_trace(t.write(tmp_path / "a.json.gz"))
    b = read_trace(t.write(tmp_path / "b.json"))
    (tmp_path / "c.json").write_text(json.dumps(t.events))
    c = read_trace(tmp_path / "c.json")
    assert a.gpu == b.gpu == c.gpu and a.host == b.host == c.host and len(a.gpu) == 6


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.integers(1, 97),
    st.lists(st.floats(0, 1e13, allow_nan=False), min_size=1, max_size=30),
    st.text(max_size=40),
)
def test_the_streamed_reader_keeps_every_event_whatever_the_window(tmp_path, monkeypatch, chunk, times, text):
    monkeypatch.setattr(trace, "_CHUNK", chunk)
    evs = [
        {"ph": "X", "cat": "kernel", "name": text, "ts": ts, "dur": 1.5, "args": {"stream": i, "device": 0}}
        for i, ts in enumerate(times)
    ]
    doc = {
        "schemaVersion": 1,
        "traceName": text,
        "traceEvents": evs,
        "baseTimeNanoseconds": 1790857026000000000,
    }
    p = tmp_path / "w.json"
    p.write_text(json.dumps(doc, indent=1))
    got = read_trace(p)
    assert [g[1] for g in got.gpu] == times and [g[4] for g in got.gpu] == list(range(len(times)))
    assert got.meta["baseTimeNanoseconds"] == 1790857026000000000 and got.meta["traceName"] == text


@pytest.mark.parametrize(
    "content, words",
    [
        ('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur"', "truncated"),
        ('{"schemaVersion": 1, "traceEvents": [', "truncated"),
        ('{"rows": [1, 2, 3]}', "not a Chrome trace"),
        ("not json at all", "not a Chrome trace"),
        ('{"traceEvents": [}', "not valid JSON"),
        ("", "empty"),
    ],
)
def test_a_broken_or_foreign_file_is_refused_in_words(tmp_path, content, words):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(UsageError, match=words):
        read_trace(p)


def test_a_gzip_cut_short_is_truncated(tmp_path):
    p = _batch_trace().write(tmp_path / "t.json.gz")
    data = p.read_bytes()
    (tmp_path / "cut.json.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(UsageError, match="truncated"):
        read_trace(tmp_path / "cut.json.gz")


# -- exposed time, idle wait, synchronous ----------------------------------------------------
def test_exposed_time_is_the_part_no_kernel_on_another_stream_overlaps(tmp_path):
    t = SyntheticTrace()
    t.copy(100, 1000, 1000, 4 * MiB, src="Pinned", call_dur=5)  # GPU [1000, 2000)
    t.kernel(1300, 300, stream=20)  # 300 µs hidden
    t.kernel(1800, 400, stream=20)  # 200 µs more
    t.kernel(1000, 1000, stream=7)  # the copy's own stream: cannot hide it
    c = analyse(read_trace(t.write(tmp_path / "x.json"))).copies
    assert c["gpu_ms"].iat[0] == pytest.approx(1.0)
    assert c["exposed_ms"].iat[0] == pytest.approx(0.5)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 800)), min_size=1, max_size=8),
    st.lists(st.tuples(st.integers(0, 6000), st.integers(1, 900), st.sampled_from([7, 20, 21])), max_size=12),
)
def test_exposed_never_exceeds_copy_time_and_equals_it_without_other_streams(tmp_path, copies, kernels):
    t = SyntheticTrace()
    for ts, d in copies:
        t.copy(ts, ts + 10, d, 1024, src="Pinned", call_dur=3, op=None)
    for ts, d, s in kernels:
        t.kernel(ts, d, stream=s)
    c = analyse(read_trace(t.write(tmp_path / "h.json"))).copies
    assert np.all(c["exposed_ms"] <= c["gpu_ms"] + 1e-12) and np.all(c["exposed_ms"] >= 0)
    if all(s == 7 for _, _, s in kernels):
        np.testing.assert_allclose(c["exposed_ms"], c["gpu_ms"])


def test_pageable_copies_are_synchronous_pinned_async_ones_are_not_unless_the_op_waits(tmp_path):
    t = SyntheticTrace()
    t.copy(100, 120, 500, MiB, src="Pageable")  # pageable: the host is held
    t.copy(1000, 1010, 500, MiB, src="Pinned", call_dur=4)  # async, nothing waits
    t.copy(3000, 3010, 500, MiB, src="Pinned", call_dur=4, op_pad=600)  # op ends after the copy
    t.sync(3010, 520)  # inside that op, covering the copy's end (3510)
    t.copy(5000, 5010, 500, MiB, src="Pinned", call_dur=4)
    t.sync(5600, 50)  # after its op: not this copy's wait
    c = analyse(read_trace(t.write(tmp_path / "s.json"))).copies.sort_values("ts")
    assert list(c["synchronous"]) == [True, False, True, False]
    assert list(c["source_memory"]) == ["pageable", "pinned", "pinned", "pinned"]


def test_gpu_idle_while_the_host_pins_the_batch_is_charged_to_its_copy(tmp_path):
    t = SyntheticTrace()
    t.step(2, 0, 10000)
    t.op("aten::pin_memory", 100, 3000)  # GPU idle throughout
    t.copy(3200, 3210, 1000, 64 * MiB, src="Pinned", call_dur=5, op_pad=10)
    t.kernel(4300, 5000, stream=7)
    t.step(3, 10000, 10000)
    t.op("aten::pin_memory", 10100, 3000)
    t.kernel(9000, 4200, stream=20)  # this time the GPU is busy while the host pins
    t.copy(13200, 13300, 1000, 64 * MiB, src="Pinned", call_dur=5, op_pad=10)
    c = analyse(read_trace(t.write(tmp_path / "p.json"))).copies.sort_values("ts")
    # step 2: the 3 ms pin + the 10 µs before the call + the 10 µs from call to copy start
    assert c["idle_wait_ms"].iat[0] == pytest.approx(3.0 + 0.01 + 0.01)
    # step 3: the kernel covers the pin and runs until the call; the op ends 15 µs later,
    # before its copy starts (an async call): 15 µs idle
    assert c["idle_wait_ms"].iat[1] == pytest.approx(0.015)


def test_steps_are_the_profiler_step_ranges_and_copies_outside_them_are_left_out(tmp_path):
    t = _batch_trace(steps=4)
    t.copy(100000, 100010, 50, 1024, src="Pinned", call_dur=3)  # after the last step
    dx = _dx(t, tmp_path)
    assert dx.steps == 4
    assert any("outside the ProfilerStep#" in n for n in dx.analysis.notes)
    d = dx.to_dict()
    (s,) = [x for x in d["sites"] if x["direction"] == "h2d" and x["source_memory"] == "pageable"]
    assert s["count"] == 4 and s["bytes"] == 4 * 64 * MiB
    # per step: 1 ms exposed copy + 20 µs GPU idle from call to copy + 2 x 5 µs op padding
    assert d["exposed_copy_ms_per_step"] == pytest.approx(1.0 + 0.02 + 0.01)
    assert s["exposed_ms_by_step"] == pytest.approx([1.03] * 4)


def test_a_trace_without_steps_counts_as_one_step_and_says_so(tmp_path):
    t = SyntheticTrace()
    t.copy(100, 120, 1000, MiB)
    t.copy(5000, 5020, 1000, MiB)
    dx = _dx(t, tmp_path)
    assert dx.steps == 1 and dx.to_dict()["sites"][0]["count"] == 2
    assert any("no ProfilerStep#" in n for n in dx.analysis.notes)


def test_a_site_is_named_by_its_record_function_range_or_its_outermost_op(tmp_path):
    t = SyntheticTrace()
    t.op("load_batch", 50, 2000, cat="user_annotation")
    t.copy(100, 120, 500, MiB)
    t.copy(3000, 3020, 500, MiB, op="aten::copy_")
    sites = set(_dx(t, tmp_path).analysis.sites["site"])
    assert sites == {"load_batch", "aten::copy_"}


# -- verdicts ------------------------------------------------------------------------------
def test_a_pageable_batch_beside_long_kernels_gets_the_side_stream_prefetch_first(tmp_path):
    v = _dx(_batch_trace(kernel_ms=5.0), tmp_path).to_dict()["sites"][0]
    assert v["recipe"] == "side_stream_prefetch"
    assert v["saving_ms_per_step"] == pytest.approx(1.03)  # all of it: the copy fits under 5 ms of kernels
    assert "synthetic machine" in v["recommendation"]


def test_without_kernels_to_hide_under_the_verdict_is_pinned_once(tmp_path):
    t = _batch_trace(kernel_ms=0.001, copy_us=6000)
    v = _dx(t, tmp_path).to_dict()["sites"][0]
    # synthetic line: 0.01 ms + 64 MiB / 50e6 B/ms = 1.352 ms; the prefetch hides only 1 µs of it
    assert v["alternatives"][0]["recipe"] == "pin_once_non_blocking"
    assert v["saving_ms_per_step"] == pytest.approx(6.03 - (0.01 + 64 * MiB / 50e6), abs=1e-3)


def test_many_small_copies_are_offered_one_packed_copy(tmp_path):
    t = SyntheticTrace()
    t.step(2, 0, 100000)
    for i in range(64):
        t.copy(100 + i * 200, 120 + i * 200, 150, MiB)
    v = _dx(t, tmp_path).to_dict()["sites"][0]
    est = {a["recipe"]: a["estimate_ms_per_step"] for a in v["alternatives"]}
    assert est["pack_small_tensors"] == pytest.approx(0.01 + 64 * MiB / 50e6, abs=1e-3)
    assert est["pin_once_non_blocking"] == pytest.approx(64 * (0.01 + MiB / 50e6), abs=1e-3)
    assert v["recipe"] == "pack_small_tensors"  # no kernels: the prefetch hides nothing


def test_a_dataloader_trace_is_told_to_pin_in_the_loader(tmp_path):
    t = _batch_trace(kernel_ms=0.001)
    t.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 10, 50, cat="user_annotation")
    recipes = [a["recipe"] for a in _dx(t, tmp_path).to_dict()["sites"][0]["alternatives"]]
    assert "dataloader_pin_memory" in recipes and "pin_each_step" not in recipes


def test_a_hidden_copy_is_left_as_it_is(tmp_path):
    t = SyntheticTrace()
    for n in range(3):
        t.step(n, n * 10000, 9000)
        t.kernel(n * 10000 + 50, 8000, stream=7, launch_ts=n * 10000 + 20)
        t.copy(n * 10000 + 100, n * 10000 + 200, 1000, 64 * MiB, src="Pinned", stream=20, call_dur=4)
    v = _dx(t, tmp_path).to_dict()["sites"][0]
    assert v["exposed_ms"] == 0 and v["recipe"] == "as_is" and v["saving_ms_per_step"] == 0


def test_copies_without_bytes_get_no_estimate_and_say_why(tmp_path):
    t = SyntheticTrace()
    t.copy(100, 120, 1000, None)
    v = _dx(t, tmp_path).to_dict()["sites"][0]
    assert v["saving_ms_per_step"] == 0 and "lacks their bytes" in v["recommendation"]


def test_the_json_object_has_the_documented_fields(tmp_path):
    d = _dx(_batch_trace(), tmp_path).to_dict()
    assert d["schema"] == "h2dlab.doctor/1" and d["steps"] == 3
    want = {"direction", "source_memory", "count", "bytes", "gpu_ms", "exposed_ms", "synchronous"}
    for s in d["sites"]:
        assert want | {"recommendation", "saving_ms_per_step"} <= set(s)
    json.dumps(d)  # plain JSON types only


# -- the command ------------------------------------------------------------------------------
def _cpu_only(tmp_path):
    t = SyntheticTrace(gpu=False)
    t.step(2, 0, 1000)
    t.op("aten::matmul", 10, 500)
    return t.write(tmp_path / "cpu.json")


def _no_copies(tmp_path):
    t = SyntheticTrace()
    t.step(2, 0, 1000)
    t.kernel(100, 500, launch_ts=50)
    return t.write(tmp_path / "nocopy.json")


def _truncated(tmp_path):
    p = tmp_path / "cut.json"
    p.write_text(json.dumps(_batch_trace().document())[:-300])
    return p


def _foreign(tmp_path):
    p = tmp_path / "other.json"
    p.write_text('{"name": "a package.json", "version": "1.0"}')
    return p


@pytest.mark.parametrize(
    "make, words",
    [
        (_cpu_only, "no GPU activity"),
        (_no_copies, "no copies"),
        (_truncated, "truncated"),
        (_foreign, "not a Chrome trace"),
    ],
)
def test_the_command_refuses_a_trace_it_cannot_judge_in_one_line_with_exit_2(tmp_path, capsys, make, words):
    code = cli.main(["doctor", str(make(tmp_path))])
    err = capsys.readouterr().err
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1


def test_the_command_prints_json_judged_against_the_bundled_recording(tmp_path, capsys):
    p = _batch_trace().write(tmp_path / "synthetic.json.gz")
    assert cli.main(["doctor", str(p), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["steps"] == 3 and "NVIDIA H200" in d["recording"]
    assert d["sites"][0]["source_memory"] == "pageable" and d["sites"][0]["synchronous"] is True


def test_profile_writes_a_trace_of_the_recorded_steps_on_cpu(tmp_path):
    import torch

    import h2dlab

    x = torch.ones(64, 64)
    before = _today()
    with h2dlab.profile(tmp_path / "mine.json.gz", steps=2) as p:
        for _ in range(4):
            (x @ x).sum()
            p.step()
    doc = json.load(gzip.open(tmp_path / "mine.json.gz"))
    steps = [e["name"] for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    # its env.json beside it, made now on this machine: what dates the doctor's figures
    env = trace.env_beside(tmp_path / "mine.json.gz")
    assert (tmp_path / "mine.env.json").is_file() and env["date"][:10] in {before, _today()}
    assert env["what"] == "h2dlab.profile(): the machine that wrote mine.json.gz"


def _today() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).date().isoformat()


def test_profile_says_when_the_block_ran_too_few_steps(tmp_path):
    import h2dlab

    with pytest.raises(UsageError, match="no step was recorded"):
        with h2dlab.profile(tmp_path / "few.json.gz") as p:
            p.step()


def test_doctor_is_callable_from_the_package(tmp_path):
    import h2dlab

    assert callable(h2dlab.doctor) and h2dlab.doctor.diagnose is diagnose


def test_the_lanes_figure_marks_exactly_the_exposed_parts(tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    from h2dlab.doctor.plot import lanes

    t = SyntheticTrace()
    t.step(2, 0, 10000)
    t.copy(100, 1000, 1000, 4 * MiB, src="Pinned", call_dur=5)  # GPU [1000, 2000) on stream 7
    t.kernel(1300, 300, stream=20)  # hides [1300, 1600): exposed [1000, 1300) and [1600, 2000)
    dx = _dx(t, tmp_path)
    fig, ax = plt.subplots()
    assert lanes(dx, ax=ax) is ax
    hatched = [c for c in ax.collections if isinstance(c, PolyCollection) and c.get_hatch()]
    (h,) = hatched
    widths = sorted(round(float(p.vertices[:, 0].max() - p.vertices[:, 0].min()), 6) for p in h.get_paths())
    assert widths == [0.3, 0.4]  # ms
    assert [t.get_text() for t in ax.get_yticklabels()] == ["GPU 0 stream 7", "GPU 0 stream 20"]


def _footnote(ax) -> str:
    (text,) = [t.get_text() for t in ax.texts if getattr(t, "_h2dlab_footnote", False)]
    return text


def _lanes_of(tmp_path, name="synthetic.json.gz"):
    import matplotlib.pyplot as plt

    from h2dlab.doctor.plot import lanes

    t = SyntheticTrace()
    t.step(2, 0, 10000)
    t.copy(100, 1000, 1000, 4 * MiB)
    dx = _dx(t, tmp_path, name)
    ax = lanes(dx)
    plt.close(ax.figure)
    return dx, _footnote(ax)


def test_the_lanes_figure_names_the_gpu_and_date_of_the_traces_env_json(tmp_path):
    # synthetic env.json: what h2dlab.profile() writes beside its trace
    env = {"gpu_name": "Synthetic GPU $1", "date": "2031-02-03T04:05:06+00:00", "torch": "9.9"}
    (tmp_path / "synthetic.env.json").write_text(json.dumps(env))
    (tmp_path / "env.json").write_text(json.dumps({"gpu_name": "the folder's", "date": "2030-01-01"}))
    dx, foot = _lanes_of(tmp_path)
    assert dx.env == env  # its own env.json before the folder's
    assert foot == (
        f"data: trace synthetic.json.gz ({tmp_path.name}) · Synthetic GPU \\$1, torch 9.9, 2031-02-03 · step 0 of 1"
    )


def test_the_lanes_figure_says_when_no_env_json_gives_the_date(tmp_path):
    _, foot = _lanes_of(tmp_path)
    assert "GPU and date not given (no env.json beside the trace)" in foot
    (tmp_path / "env.json").write_text("[1, 2]")  # JSON, not an object: not an env.json
    assert "GPU and date not given" in _lanes_of(tmp_path)[1]
    (tmp_path / "env.json").write_text(json.dumps({"gpu_name": "Synthetic GPU"}))  # the folder's, no date
    assert _lanes_of(tmp_path)[1].endswith("· Synthetic GPU, date not given · step 0 of 1")


def test_the_bundled_traces_lanes_carry_their_recording_date():
    import matplotlib.pyplot as plt

    from h2dlab.doctor import TRACES, trace_path
    from h2dlab.doctor.plot import lanes

    env = json.loads((TRACES / "env.json").read_text())
    ax = lanes(diagnose(trace_path("", "batch_pageable"), machine=SYNTH))
    plt.close(ax.figure)
    foot = _footnote(ax)
    assert foot.startswith("data: trace batch_pageable.json.gz (traces) · ")
    assert env["gpu_name"] in foot and env["date"][:10] in foot


def test_copies_within_the_gpu_are_sites_but_not_part_of_the_exposed_copy_time(tmp_path):
    t = SyntheticTrace()
    t.step(2, 0, 10000)
    t.copy(100, 120, 1000, MiB)  # h2d: 1 ms + 20 µs idle + 10 µs padding
    t.copy(2000, 2010, 500, MiB, kind="DtoD", src="Device", dst="Device", call_dur=4, op="aten::cat")
    dx = _dx(t, tmp_path)
    assert {s["direction"] for s in dx.to_dict()["sites"]} == {"h2d", "d2d"}
    assert dx.exposed_copy_ms_per_step == pytest.approx(1.0 + 0.02 + 0.01)


def test_the_table_and_summary_say_the_answer_first(tmp_path):
    dx = _dx(_batch_trace(), tmp_path)
    first = dx.table().splitlines()[0]
    assert first.startswith("synthetic.json.gz: 3 steps; copies add 1.03 ms per step")
    assert dx.summary().startswith("In `synthetic.json.gz` (3 traced steps), copies add 1.03 ms to each step")


def test_a_missing_bundled_trace_is_named_with_how_to_make_it(tmp_path, monkeypatch):
    from h2dlab import doctor

    monkeypatch.setattr(doctor, "TRACES", tmp_path)
    with pytest.raises(UsageError, match="record_traces.py"):
        doctor.trace_path("", "batch_pageable")
    assert doctor.trace_path("mine.json.gz") == type(tmp_path)("mine.json.gz")


def test_cuda_calls_without_gpu_events_are_refused_as_no_gpu_activity(tmp_path, capsys):
    t = SyntheticTrace()
    t.step(2, 0, 1000)
    t.sync(100, 50)
    assert cli.main(["doctor", str(t.write(tmp_path / "calls.json"))]) == 2
    assert "CUDA calls but no GPU events" in capsys.readouterr().err


# -- hostile traces: damaged fields, deep nesting, markup in names ---------------------------
def _edit(t: SyntheticTrace, cat: str, **fields) -> SyntheticTrace:
    for e in t.events:
        if e.get("cat") == cat:
            for k, v in fields.items():
                if k == "args":
                    e["args"] = v
                elif k.startswith("args."):
                    e["args"][k[5:]] = v
                else:
                    e[k] = v
    return t


@pytest.mark.parametrize(
    "cat, fields",
    [
        ("gpu_memcpy", {"args.correlation": float("inf")}),  # JSON 1e999
        ("gpu_memcpy", {"args.stream": float("inf")}),
        ("gpu_memcpy", {"args.bytes": 10**400}),
        ("gpu_memcpy", {"args": [1, 2]}),
        ("cpu_op", {"pid": [1]}),
        ("cuda_runtime", {"tid": {"a": 1}}),
    ],
)
def test_a_trace_with_fields_of_the_wrong_type_is_read_not_a_traceback(tmp_path, capsys, cat, fields):
    p = tmp_path / "synthetic.json"
    p.write_text(json.dumps(_edit(_batch_trace(), cat, **fields).document()).replace("Infinity", "1e999"))
    assert cli.main(["doctor", str(p), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["steps"] == 3 and sum(s["count"] for s in d["sites"]) == 3


def test_copies_with_a_negative_or_infinite_time_are_left_out_and_said_so(tmp_path):
    t = _batch_trace()
    t.copy(30000, 30010, 5000, MiB)  # a fourth copy, in the last step
    t.events[-2]["dur"] = -5000.0  # a negative duration would subtract from the step's copy time
    t.kernel(100, float("inf"), stream=9)  # an infinite kernel would make every figure inf
    p = tmp_path / "synthetic.json"
    p.write_text(json.dumps(t.document()).replace("Infinity", "1e999"))
    dx = diagnose(p, machine=SYNTH)
    clean = _dx(_batch_trace(), tmp_path)
    assert dx.exposed_copy_ms_per_step == pytest.approx(clean.exposed_copy_ms_per_step)
    assert dx.analysis.kernel_ms_per_step == pytest.approx(clean.analysis.kernel_ms_per_step)
    assert any("2 events with a time that is not a finite number" in n for n in dx.analysis.notes)
    json.loads(json.dumps(dx.to_dict(), allow_nan=False))  # valid JSON: no NaN, no Infinity


@pytest.mark.parametrize("where", ["events", "meta"])
def test_json_nested_too_deeply_is_refused_in_one_line_with_exit_2(tmp_path, capsys, where):
    deep = "[" * 100_000 + "]" * 100_000
    text = f'{{"traceEvents": [{deep}]}}' if where == "events" else f'{{"x": {deep}, "traceEvents": []}}'
    (tmp_path / "deep.json").write_text(text)
    assert cli.main(["doctor", str(tmp_path / "deep.json")]) == 2
    err = capsys.readouterr().err
    assert "nested too deeply" in err and len(err.strip().splitlines()) == 1


def test_a_trace_saved_with_a_byte_order_mark_is_read(tmp_path):
    p = tmp_path / "synthetic.json"
    p.write_text("\ufeff" + json.dumps(_batch_trace().document()), encoding="utf-8")
    assert read_trace(p).gpu == read_trace(_batch_trace().write(tmp_path / "plain.json")).gpu


def test_site_and_file_names_from_the_trace_render_as_text_in_markdown(tmp_path):
    evil = "\n````\n<img src=x onerror=alert(1)>"  # under the table's 34 characters
    t = _edit(_batch_trace(), "cpu_op", name=evil)
    dx = _dx(t, tmp_path, name="a`b<i>.json.gz")
    md = dx._repr_markdown_()
    fence = md.split("\n", 1)[0]
    body = md[len(fence) + 1 : -len(fence) - 1]
    assert set(fence) == {"`"} and md.endswith("\n" + fence)
    assert not any(line.strip().startswith(fence) for line in body.splitlines())  # nothing closes it
    s = dx.summary()
    outside = re.sub(r"`[^`]*`", "", s)  # a code span shows its content as literal text
    assert "<" not in outside and "\n" not in s and "`" not in outside


def test_a_gzip_that_unpacks_past_the_limit_is_refused_as_a_bomb(tmp_path, capsys, monkeypatch):
    p = tmp_path / "bomb.json.gz"
    events = json.dumps(_batch_trace().document()["traceEvents"])[1:-1]
    with gzip.open(p, "wt") as f:  # a valid trace, padded with 20 MB of blanks between events
        f.write('{"traceEvents": [' + events + "," + " " * (20 * MiB) + events + "]}")
    assert p.stat().st_size < MiB
    monkeypatch.setenv("H2DLAB_MAX_TRACE_BYTES", str(10 * MiB))
    assert cli.main(["doctor", str(p)]) == 2
    err = capsys.readouterr().err
    assert (
        "decompression bomb" in err and "H2DLAB_MAX_TRACE_BYTES" in err and len(err.strip().splitlines()) == 1
    )
    monkeypatch.setenv("H2DLAB_MAX_TRACE_BYTES", str(30 * MiB))
    assert len(read_trace(p).gpu) == 2 * len(read_trace(_batch_trace().write(tmp_path / "one.json")).gpu)


def test_an_empty_recording_option_is_a_usage_error_not_a_traceback(tmp_path, capsys):
    p = _batch_trace().write(tmp_path / "synthetic.json.gz")
    assert cli.main(["doctor", str(p), "--recording", " "]) == 2
    err = capsys.readouterr().err
    assert "--recording" in err and len(err.strip().splitlines()) == 1


def test_control_characters_in_trace_names_never_reach_the_terminal(tmp_path, capsys):
    osc = "\x1b]0;owned\x07\x1b[2J\u202egnp.exe\u2028x\x9b31m"  # title, clear screen, RTL override, C1 CSI
    t = _edit(_batch_trace(), "cpu_op", name="aten::to" + osc)
    p = t.write(tmp_path / "synthetic.json.gz")
    assert cli.main(["doctor", str(p)]) == 0
    assert cli.main(["doctor", str(p), "--json"]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\x9b\u202e\u2028")
    assert "aten::to\ufffd]0;owned" in out  # the rest of the name is kept, as text


def test_a_step_range_repeated_in_the_trace_counts_once(tmp_path):
    t = _batch_trace()
    t.events += [dict(e) for e in t.events if str(e.get("name", "")).startswith("ProfilerStep#")]
    dx = _dx(t, tmp_path)
    clean = _dx(_batch_trace(), tmp_path, name="clean.json.gz")
    assert dx.steps == clean.steps == 3
    assert dx.exposed_copy_ms_per_step == pytest.approx(clean.exposed_copy_ms_per_step)


def test_copies_whose_launching_call_is_missing_beside_others_are_judged_not_a_traceback(tmp_path, capsys):
    t = _batch_trace()
    runtime = [e for e in t.events if e.get("cat") == "cuda_runtime"]
    runtime[0]["args"]["correlation"] = {}  # this copy's call no longer names it (a flow pointing nowhere)
    p = t.write(tmp_path / "synthetic.json.gz")
    assert cli.main(["doctor", str(p), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    lost = [s for s in d["sites"] if s["site"] == "(no launching call in the trace)"]
    assert (
        len(lost) == 1
        and lost[0]["count"] == 1
        and lost[0]["op_chain"] == ""
        and lost[0]["synchronous"] is None
    )
    assert sum(s["count"] for s in d["sites"]) == 3


def test_a_diagnosis_repr_is_one_short_line_without_the_traces_folder():
    """A notebook stores the plain-text repr beside the Markdown one: it must not dump the
    copies table, the machine's env.json or the reader's home folder into a shared file."""
    from h2dlab import doctor

    dx = doctor.diagnose(doctor.TRACES / "batch_pageable.json.gz")
    text = repr(dx)
    assert "\n" not in text and len(text) < 200
    assert "batch_pageable.json.gz" in text and str(doctor.TRACES) not in text
    assert f"{dx.exposed_copy_ms_per_step:.2f} ms" in text
