"""Rows to disk, the stop flag and the resume check: a resume that does not follow the
first run's spec and plan must be refused, field by field and row by row."""

import signal

import numpy as np
import pandas as pd
import pytest

from h2dlab.errors import UsageError
from h2dlab.measure.harness import sweep
from h2dlab.measure.plan import plan_sweep
from h2dlab.measure.recorder import (
    Recording,
    RowWriter,
    StopFlag,
    check_resume,
    existing_rows,
    partial_path,
    progress_bar,
)
from h2dlab.measure.spec import SweepSpec
from h2dlab.recording import datasets

PLAN = plan_sweep(["pageable"], [1024, 2048], reps=2, warmup=1, seed=3)


def _done(rows):
    return pd.DataFrame(rows)


def test_check_resume_accepts_a_prefix_of_the_plan():
    check_resume(_done(PLAN[:4]), PLAN)
    check_resume(_done(PLAN[:0]), PLAN)
    check_resume(_done(PLAN), PLAN)


@pytest.mark.parametrize(
    "field,value", [("strategy", "staged"), ("size_bytes", 4096), ("rep", 7), ("warmup", True)]
)
def test_check_resume_refuses_a_row_off_the_plan(field, value):
    rows = [dict(r) for r in PLAN[:3]]
    rows[2][field] = value
    with pytest.raises(UsageError, match="cannot resume: row 2 on disk"):
        check_resume(_done(rows), PLAN)


def test_check_resume_refuses_more_rows_than_planned():
    with pytest.raises(UsageError, match="holds 7 rows but the plan has 6"):
        check_resume(_done([*PLAN, PLAN[0]]), PLAN)


def test_check_resume_refuses_another_spec():
    a = SweepSpec(("pageable",), (1024,), device="cpu", reps=150).to_dict()
    b = SweepSpec(("pageable",), (1024,), device="cpu", reps=9).to_dict()
    with pytest.raises(UsageError, match="reps was 150, now 9"):
        check_resume(_done(PLAN[:1]), PLAN, a, b)
    check_resume(_done(PLAN[:1]), PLAN, a, a)


def _interrupted(tmp_path, spec, after):
    """A sweep stopped after ``after`` cells, as a signal would stop it."""
    out = tmp_path / "r.csv"
    stop = StopFlag()
    seen = []

    def before(flag):
        seen.append(1)
        if len(seen) > after:
            flag.request(signal.SIGTERM)

    df = sweep(spec, out=out, progress=False, stop=stop, before_cell=before)
    assert df.attrs["stopped"] and stop.signum == signal.SIGTERM
    return out, df


def test_resume_through_sweep_refuses_a_changed_spec_and_finishes_the_same(tmp_path):
    spec = SweepSpec(("pageable",), (1024, 2048, 4096), device="cpu", reps=3, warmup=1, seed=5)
    out, first = _interrupted(tmp_path, spec, after=1)
    assert len(first) == 4 and partial_path(out).exists() is False
    for changed in (
        SweepSpec(("pageable",), (1024, 2048, 4096), device="cpu", reps=4, warmup=1, seed=5),
        SweepSpec(("pageable",), (1024, 2048, 4096), device="cpu", reps=3, warmup=1, seed=6),
        # the same plan, another spec: only the spec comparison can tell
        SweepSpec(
            ("pageable",), (1024, 2048, 4096), device="cpu", reps=3, warmup=1, seed=5, empty_cache=True
        ),
    ):
        with pytest.raises(UsageError, match="cannot resume"):
            sweep(changed, out=out, resume=True, progress=False)
    done = sweep(spec, out=out, resume=True, progress=False)
    assert len(done) == 12 and done["run_id"].nunique() == 1
    assert done["order"].tolist() == list(range(12))
    pd.testing.assert_frame_equal(done.head(4), first, check_dtype=False)


def test_resume_refuses_rows_that_do_not_follow_the_plan_even_with_the_same_spec(tmp_path):
    """The env.json spec matches, but the rows on disk were written by another plan."""
    spec = SweepSpec(("pageable",), (1024, 2048, 4096), device="cpu", reps=3, warmup=1, seed=5)
    out, first = _interrupted(tmp_path, spec, after=1)
    tampered = first.copy()
    tampered.loc[[2, 3], "rep"] = tampered.loc[[3, 2], "rep"].to_numpy()  # two reps swapped
    datasets.save(tampered, out, env=datasets.read_env(out))
    with pytest.raises(UsageError, match="row 2 on disk"):
        sweep(spec, out=out, resume=True, progress=False)


def test_nothing_to_resume(tmp_path):
    spec = SweepSpec(("pageable",), (1024,), device="cpu")
    with pytest.raises(UsageError, match="nothing to resume"):
        Recording(tmp_path / "none.csv", spec.to_dict(), PLAN, resume=True)
    with pytest.raises(UsageError, match="output file"):
        Recording(None, spec.to_dict(), PLAN, resume=True)


def test_stop_flag_request_and_signal():
    flag = StopFlag()
    assert not flag
    flag.request()
    assert flag and flag.signum == signal.SIGINT
    flag.request(signal.SIGTERM)  # the first reason stays
    assert flag.signum == signal.SIGINT
    other = StopFlag()
    with other.installed():
        signal.raise_signal(signal.SIGTERM)
        assert other.signum == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)  # a second signal: stop now
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_check_resume_names_every_changed_field_and_the_way_out():
    a = SweepSpec(("pageable",), (1024,), device="cpu", reps=150).to_dict()
    b = SweepSpec(("pageable",), (1024,), device="cpu", reps=9, seed=2).to_dict()
    with pytest.raises(UsageError) as info:
        check_resume(_done(PLAN[:1]), PLAN, a, b)
    assert str(info.value) == (
        "cannot resume: this run's spec differs from the first run's (reps was 150, now 9; seed was 0, now 2): "
        "resume with the first run's spec, or force a new run to replace it"
    )
    rows = [dict(r) for r in PLAN[:3]]
    rows[1]["rep"] = 5
    with pytest.raises(UsageError) as info:
        check_resume(_done(rows), PLAN)
    want = PLAN[1]
    assert str(info.value) == (
        f"cannot resume: row 1 on disk is ('pageable', {want['size_bytes']}, 5, {want['warmup']}), not the "
        f"planned ('pageable', {want['size_bytes']}, {want['rep']}, {want['warmup']}): "
        "resume with the first run's spec"
    )


@pytest.mark.parametrize("recorded", [None, {}])
def test_check_resume_without_a_recorded_spec_checks_the_rows_only(recorded):
    """A table whose env.json has no spec (older versions) is resumed on its rows alone."""
    now = SweepSpec(("pageable",), (1024,), device="cpu").to_dict()
    check_resume(_done(PLAN[:2]), PLAN, recorded, now)
    with pytest.raises(UsageError, match="holds 7 rows"):
        check_resume(_done([*PLAN, PLAN[0]]), PLAN, recorded, now)


def test_a_run_stopped_before_its_first_row_is_an_empty_table_of_the_schema(tmp_path):
    out = tmp_path / "none.csv"
    spec = SweepSpec(("pageable",), (1024,), device="cpu")
    rec = Recording(out, spec.to_dict(), PLAN)
    stop = StopFlag()
    stop.request(signal.SIGTERM)
    df = rec.finish(stop, gpu=False)
    assert len(df) == 0 and list(df.columns) == list(datasets.COLUMNS)
    assert df.attrs["stopped"] is True and df.attrs["planned_rows"] == len(PLAN)
    assert (
        df.attrs["env"]["stopped_by_signal"] == signal.SIGTERM == datasets.read_env(out)["stopped_by_signal"]
    )
    assert df.attrs["env"]["measured_rows"] == 0 and df.attrs["env"]["planned_rows"] == len(PLAN)
    assert rec.writer.fh.closed and not partial_path(out).exists()


def test_a_stopped_sweep_records_the_signal_in_its_env(tmp_path):
    spec = SweepSpec(("pageable",), (1024, 2048), device="cpu", reps=2, warmup=0, seed=1)
    out, df = _interrupted(tmp_path, spec, after=1)
    assert df.attrs["env"]["stopped_by_signal"] == signal.SIGTERM
    assert datasets.read_env(out)["stopped_by_signal"] == signal.SIGTERM
    done = sweep(spec, out=out, resume=True, progress=False)
    assert done.attrs["env"]["stopped_by_signal"] is None and not done.attrs["stopped"]
    # the resumed part continues the first part's clock: its rows come at least 1 s later
    first, rest = done[done.order < len(df)], done[done.order >= len(df)]
    assert rest["t_s"].min() >= first["t_s"].max() + 1.0


def test_row_writer_alone_finishes_and_closes_once(tmp_path):
    """A RowWriter without a Recording: no env.json beside its partial file to remove."""
    out = tmp_path / "w.csv"
    w = RowWriter(out)
    assert not w.fh.closed
    w.write({**PLAN[0], "run_id": "synthetic", "shape": "(1024,)", "dtype": "uint8", "t_s": 0.0, "wall_ms": 0.5,
             "empty_cache": False, "error": ""})  # fmt: skip
    df = w.finish({"note": "synthetic"})
    assert len(df) == 1 and datasets.read(out)["wall_ms"].tolist() == [0.5]
    assert w.fh.closed and not partial_path(out).exists()
    w.close()  # idempotent
    w2 = RowWriter(tmp_path / "c.csv")
    w2.close()
    assert w2.fh.closed


def test_existing_rows_of_a_partial_file_killed_before_its_header(tmp_path):
    out = tmp_path / "e.csv"
    partial_path(out).write_bytes(b"")
    df, env = existing_rows(out)
    assert len(df) == 0 and list(df.columns) == list(datasets.COLUMNS) and env is None
    assert existing_rows(tmp_path / "never.csv") == (None, None)


def test_elapsed_counts_from_the_start_of_the_run():
    rec = Recording(None, SweepSpec(("pageable",), (1024,), device="cpu").to_dict(), PLAN)
    first = rec.elapsed()
    assert 0.0 <= first < 60.0 and rec.elapsed() >= first


def test_progress_bar_on_stderr_or_none(monkeypatch):
    import sys

    assert progress_bar(10, 3, "sweep", enabled=False) is None
    bar = progress_bar(10, 3, "sweep", enabled=True)
    try:
        assert (bar.total, bar.n, bar.desc, bar.unit, bar.fp) == (10, 3, "sweep", "copy", sys.stderr)
        assert bar.dynamic_ncols
    finally:
        bar.close()
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # tqdm not installed
    assert progress_bar(10, 3, "sweep", enabled=True) is None


def _synthetic_row(order, direction):
    return {"order": order, "strategy": "pageable", "direction": direction, "size_bytes": 1024, "rep": order,
            "warmup": False, "shape": "(1024,)", "dtype": "uint8", "t_s": 0.0, "wall_ms": 0.5, "event_ms": np.nan,
            "host_allocs": np.nan, "device_allocs": np.nan, "empty_cache": False, "error": ""}  # fmt: skip


@pytest.mark.parametrize("to_file", [False, True])
def test_finish_sorts_by_order_keeping_the_written_order_of_ties(tmp_path, to_file):
    """Both directions of one planned copy share its order (bidir): the table is sorted by
    order, and within an order the rows stay as written (a stable sort)."""
    orders = np.random.default_rng(0).permutation(30)
    rec = Recording(tmp_path / "b.csv" if to_file else None, {"kind": "synthetic"}, PLAN)
    for k in orders:
        for d in ("h2d", "d2h"):
            rec.write(_synthetic_row(int(k), d))
    df = rec.finish(StopFlag(), gpu=False)
    assert df["order"].tolist() == [k for k in range(30) for _ in (0, 1)]
    assert df["direction"].tolist() == ["h2d", "d2h"] * 30 and df.index.tolist() == list(range(60))


def test_a_run_in_memory_stopped_before_its_first_row_is_an_empty_table_of_the_schema():
    rec = Recording(None, {"kind": "synthetic"}, PLAN)
    df = rec.finish(StopFlag(), gpu=False)
    assert len(df) == 0 and list(df.columns) == list(datasets.COLUMNS)
    assert df.attrs["stopped"] is False and df.attrs["env"]["measured_rows"] == 0
