"""``factors.idle_wake`` and ``wake_calibration`` on idle runs that cannot tell, or only
partly tell, what a pause costs (one pause, a strategy lacking a pause) and on pauses that
made copies faster; ``plots.idle_pause`` with nothing to draw; what ``h2dlab record`` and
``session.lacks`` say when a plan leaves the idle runs out. Every table is synthetic."""

import re

import matplotlib
import pandas as pd
import pytest

from h2dlab.cli import main as cli
from h2dlab.explain.idle import wake_calibration
from h2dlab.findings import factors
from h2dlab.recording.folder import new_manifest, write_manifest
from h2dlab.recording.session import Recorded
from h2dlab.show import plots
from tests.explain.test_wake_calibration import synthetic_recording

matplotlib.use("Agg")


def synthetic_idle(value, pauses=(0.0, 3.0, 10.0), strategies=("pinned_reuse", "pageable"), n=20):
    """Runs measured with each pause; ``value(strategy, size, pause, k)`` is copy k's time (ms)."""
    rows, envs = [], {}
    for pause in pauses:
        rid = f"synthetic-{pause:g}"
        envs[rid] = {"spec": {"pause_ms": pause, "device": "cuda:0"}}
        for strategy in strategies:
            for size in (4096, 2**20):
                for k in range(n):
                    v = value(strategy, size, pause, k)
                    rows.append(
                        dict(
                            run_id=rid,
                            strategy=strategy,
                            size_bytes=size,
                            warmup=False,
                            error="",
                            event_ms=v,
                            wall_ms=v,
                        )
                    )
    df = pd.DataFrame(rows)
    df.attrs["envs"] = envs
    return df


def _base(strategy, size):
    return {4096: 0.010, 2**20: 0.030}[size] * (2 if strategy == "pageable" else 1)


NEGATIVE_DURATION = re.compile(r"-\s?\d[\d.]*\s?(µs|ms)")


def test_a_pause_that_speeds_the_large_copies_is_said_without_negative_durations():
    # the longest pause: small copies 60 % slower, large ones 5 µs faster (every copy)
    def value(strategy, size, pause, k):
        change = (0.006 if size == 4096 else -0.005) * (pause == 10.0)
        return _base(strategy, size) + change + 0.00001 * k

    f = factors.idle_wake(synthetic_idle(value))
    assert not NEGATIVE_DURATION.search(f.verdict), f.verdict
    assert "At 1 MiB the longest pause took 5 µs off a 30 µs median (0.83x)" in f.verdict
    assert "At 1 MiB the longest pause took 5 µs off a 60 µs median (0.92x)" in f.verdict
    lo, hi = f["added_ms"]
    assert lo == pytest.approx(-0.005) and hi == pytest.approx(0.006)
    assert "The longest pause changed the medians by 5 µs less to 6 µs more" in f.verdict


def test_pauses_that_only_speed_copies_say_less_not_minus():
    def value(strategy, size, pause, k):
        return _base(strategy, size) - 0.004 * (pause > 0) + 0.00001 * k

    f = factors.idle_wake(synthetic_idle(value))
    assert not NEGATIVE_DURATION.search(f.verdict), f.verdict
    assert f["extra_p90_ms"] < 0
    x = -f["extra_p90_ms"] * 1e3
    assert f"every cell's 90th percentile was at least {x:.0f} µs below the same cell's median" in f.verdict
    assert "at most" not in f.verdict and not f.holds


def _wakes(strategy, size, pause, k):
    return (
        _base(strategy, size) + (0.02 if pause == 10.0 and size == 4096 and k % 2 == 0 else 0.0) + 0.00001 * k
    )


def test_one_pause_gives_a_finding_that_says_what_is_missing():
    df = synthetic_idle(_wakes, pauses=(1.0,))
    f = factors.idle_wake(df)
    assert not f.holds and f["cells"].empty and f["pauses"] == [1.0]
    assert f.verdict.startswith(
        "The idle runs hold one pause (1 ms): at least two pauses with timed copies are needed to tell what a pause costs"
    )
    assert "`h2dlab record --only idle`" in f.verdict
    with pytest.raises(ValueError, match="one pause"):
        wake_calibration(df)
    failed = synthetic_idle(_wakes).assign(error="synthetic failure")
    assert factors.idle_wake(failed).verdict.startswith(
        "The idle runs hold no timed copy (every row a warm-up"
    )
    df.attrs["envs"] = {}
    assert factors.idle_wake(df).verdict.startswith("The idle runs hold no pause")


def test_a_strategy_lacking_a_pause_is_left_out_and_named():
    full = synthetic_idle(_wakes)
    df = full[~((full.strategy == "pinned_reuse") & (full.run_id == "synthetic-10"))].copy()
    df.attrs = full.attrs
    f = factors.idle_wake(df)
    assert set(f["cells"]["strategy"]) == {"pageable"} and f["missing"] == {"pinned_reuse": [10.0]}
    assert "Left out, as not timed after every pause: `pinned_reuse` lacks 10 ms." in f.verdict
    assert "`pinned_reuse` copy" not in f.verdict
    cal = wake_calibration(df)
    assert cal.shares == pytest.approx((0.0, 0.0, 0.5)) and cal.idle_ms == 10.0


def test_no_strategy_with_every_pause_gives_a_finding_not_an_error():
    full = synthetic_idle(_wakes)
    df = full[
        ~((full.strategy == "pinned_reuse") & (full.run_id == "synthetic-10"))
        & ~((full.strategy == "pageable") & (full.run_id == "synthetic-3"))
    ].copy()
    df.attrs = full.attrs
    f = factors.idle_wake(df)
    assert not f.holds and f["cells"].empty
    assert f.verdict.startswith("No strategy of the idle runs was timed after every pause (0, 3, 10 ms: ")
    assert "`pageable` lacks 3 ms; `pinned_reuse` lacks 10 ms" in f.verdict
    with pytest.raises(ValueError, match="No strategy"):
        wake_calibration(df)


def test_idle_pause_figure_with_nothing_to_draw_says_why():
    df = synthetic_idle(_wakes, pauses=(1.0,))
    ax = plots.idle_pause(df)
    texts = [t.get_text().replace("\n", " ") for t in ax.texts]
    assert texts == [factors.idle_wake(df).verdict] and not ax.lines
    full = plots.idle_pause(synthetic_idle(_wakes))
    assert len(full.lines) == 2 * 4  # median and p90 per strategy and size


# --- where a plan leaves the idle runs out --------------------------------------------------


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--quick", "--only", "idle"], "idle is not in the --quick plan: drop --quick"),
        (["--quick", "--only", "pause-3ms"], "pause-3ms is not in the --quick plan: drop --quick"),
        (
            ["--device", "cpu", "--only", "idle"],
            "idle needs a CUDA GPU (--device cpu records the sweep only)",
        ),
        (["--only", "concurrent"], "concurrent needs 2 GPUs; this machine has 1"),
        (["--only", "nothing-such"], "no experiment named 'nothing-such'"),
    ],
)
def test_record_says_why_a_named_experiment_is_left_out(tmp_path, capsys, argv, said):
    assert cli.main(["record", "--dry-run", "--out", str(tmp_path / "r"), *argv]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1, err


def test_record_dry_run_counts_one_experiment_in_the_singular(tmp_path, capsys):
    assert cli.main(["record", "--dry-run", "--out", str(tmp_path / "r"), "--only", "pause-3ms"]) == 0
    out = capsys.readouterr().out
    assert f": 1 experiment into {tmp_path / 'r'}" in out and "1 experiments" not in out


@pytest.mark.parametrize(
    "manifest, why",
    [
        ({"quick": True}, "the idle runs are in the full plan only: this is a --quick recording"),
        ({"plan_version": 2}, "the idle runs came with plan 3: this recording was made with plan 2"),
        ({"device": "cpu"}, "they need a CUDA GPU: this recording was made with --device cpu"),
        ({}, "the idle runs came with plan 3: a --quick recording, or one made with an older plan, has none"),
    ],
)
def test_lacks_gives_the_reason_idle_runs_are_missing(tmp_path, manifest, why):
    folder = synthetic_recording(tmp_path / "rec")
    for p in (folder / "idle").iterdir():
        p.unlink()
    m = new_manifest([], quick=bool(manifest.get("quick")), device=manifest.get("device", "cuda"), gpus=1,
                     gpu_name="synthetic GPU", command="synthetic")  # fmt: skip
    if "plan_version" in manifest:
        m["plan_version"] = manifest["plan_version"]
    write_manifest(folder, m)
    said = Recorded(str(folder)).lacks("idle")
    assert said == f"This recording has no idle runs ({why}): this section is skipped."
    assert "CUDA" not in said or manifest.get("device") == "cpu"
