"""Rows to disk, the stop flag and the resume check: a resume that does not follow the
first run's spec and plan must be refused, field by field and row by row."""

import signal

import pandas as pd
import pytest

from h2dlab import datasets
from h2dlab.errors import UsageError
from h2dlab.measure import sweep
from h2dlab.plan import plan_sweep
from h2dlab.recorder import Recording, StopFlag, check_resume, partial_path
from h2dlab.spec import SweepSpec

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
