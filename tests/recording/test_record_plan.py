"""The recording plan is valid: every run parses with the real CLI, fits the time budget,
and covers what the bundled H200 recording holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from h2dlab.cli import main as cli
from h2dlab.cli.main import build_parser, spec_from_args
from h2dlab.cli.measuring import batch_spec, duplex_spec
from h2dlab.measure.spec import SweepSpec
from h2dlab.measure.strategies import REGISTRY
from h2dlab.recording import session
from h2dlab.recording.plan import (
    KINDS,
    PLAN,
    QUICK_CAP_BYTES,
    RETIRED,
    experiment_from_dict,
    experiments,
    select,
    show_args,
    total_seconds,
)
from h2dlab.units import forum_sizes


@pytest.mark.parametrize("quick", [False, True])
def test_every_run_parses_with_the_cli(quick):
    parser = build_parser()
    for e in experiments(quick=quick, gpus=2):
        argv = [*e.argv(quick), "--out", f"x/{e.kind}/{e.run}.csv.gz"]
        args = parser.parse_args(argv)
        if args.cmd == "workload":  # its own spec (h2dlab.measure.workload)
            from h2dlab.cli.workload import spec as workload_spec

            assert workload_spec(args).to_dict()["kind"] == "workload"
            continue
        if args.cmd in ("duplex", "batch"):  # their own specs (h2dlab.measure.duplex, h2dlab.measure.batch)
            (duplex_spec if args.cmd == "duplex" else batch_spec)(args)  # UsageError if invalid
            continue
        spec = spec_from_args(args)  # raises UsageError for anything invalid
        assert spec.to_dict()["kind"] in ("sweep", "forum", "overlap")
        if quick and isinstance(spec, SweepSpec):
            assert max(spec.sizes) <= 2**30  # quick caps every sweep at 1 GiB


def test_names_are_unique_and_kinds_known():
    assert len({e.run for e in PLAN}) == len(PLAN)
    assert {e.kind for e in PLAN} <= set(KINDS)
    assert all(e.seconds > 0 and (e.quick_seconds > 0 or not e.in_quick()) for e in PLAN)


def test_plan_reproduces_the_bundled_recording():
    rec = session.recording("h200")
    bundled = {(k, r) for k in rec.kinds() for r in rec.runs(k)}
    plan = {(e.kind, e.run) for e in experiments(gpus=2)}
    assert bundled - set(RETIRED) <= plan  # every bundled run is made by the plan, or retired with a reason
    assert all(len(why) > 20 for why in RETIRED.values())
    quick = {(e.kind, e.run) for e in experiments(quick=True, gpus=2)}
    # every figure's data (pin-register-warm feeds no figure: --quick leaves it out)
    # (batch/mixed: a second layout of the same figure; --quick records the equal one)
    # (idle/*: four processes past the quick budget; a quick recording's notebook 03 says it lacks them)
    skipped = {("forum", "ascending-2"), ("allocator", "pin-register-warm"), ("batch", "mixed")}
    skipped |= {("idle", f"pause-{ms}ms") for ms in (0, 1, 3, 10)}
    # (workload/steps, reference/reference: plan 4's, full plan only: past the quick budget)
    skipped |= {("workload", "steps"), ("reference", "reference")}
    assert bundled - skipped - set(RETIRED) <= quick
    # the allocator setting goes to exactly the register runs, as in the bundled env.json
    for e in PLAN:
        if (e.kind, e.run) in bundled:
            conf = rec.env(e.kind, e.run).get("PYTORCH_CUDA_ALLOC_CONF")
            assert dict(e.env).get("PYTORCH_CUDA_ALLOC_CONF") == conf, e.run


def _bundled_manifest() -> dict:
    import json

    return json.loads((Path(__file__).resolve().parents[2] / "data/h200/recording.json").read_text())


#: Runs the plan has that the bundled data/h200/recording.json does not have yet: their
#: estimates are estimates until the plan is recorded again; then these names must come off
#: this list (the test below says so). Plan 3 was recorded whole at 250f304: none.
NOT_RECORDED_YET: set[str] = set()  # plan 4 recorded whole at 66f20f2


def test_full_plan_estimates_are_the_bundled_recordings_wall_times():
    # the estimates are documented as measured: each one-GPU run's is its wall time in
    # data/h200/recording.json, recorded by this very plan (same arguments, same environment).
    # Runs the bundled recording does not have yet (NOT_RECORDED_YET: plan 3's idle kind) are
    # skipped here, not failed; every other run must match exactly.
    manifest = _bundled_manifest()
    assert manifest["status"] == "complete" and not manifest["quick"]
    recorded = {r["name"]: r for r in manifest["experiments"]}
    assert not NOT_RECORDED_YET & set(recorded), "recorded now: take them off NOT_RECORDED_YET"
    checked = [e for e in experiments(gpus=1) if e.name not in NOT_RECORDED_YET]
    assert {e.name for e in experiments(gpus=1)} - {e.name for e in checked} == NOT_RECORDED_YET
    for e in checked:
        r = recorded[e.name]
        assert r["args"] == e.argv() and r["env"] == dict(e.env), e.name
        assert e.seconds == r["wall_s"], e.name
    assert round(total_seconds(checked)) == round(sum(r["wall_s"] for r in recorded.values()))


def test_idle_kind_is_four_pauses_of_the_same_small_copies():
    from h2dlab.recording.plan import PLAN_VERSION

    assert PLAN_VERSION >= 3 and KINDS.index("idle") == KINDS.index("batch") + 1 and KINDS.count("idle") == 1
    idle = [e for e in PLAN if e.kind == "idle"]
    assert [e.name for e in idle] == ["idle/pause-0ms", "idle/pause-1ms", "idle/pause-3ms", "idle/pause-10ms"]
    i = PLAN.index(idle[0])
    assert PLAN[i : i + len(idle)] == tuple(idle) and PLAN[i - 1].kind == "batch"  # after batch
    assert PLAN[-1].kind == "concurrent"  # the two-GPU run last
    base = "measure --sizes 4KiB,64KiB,1MiB --strategies pinned_reuse,pageable --reps 40 --order interleaved --seed 1"
    parser = build_parser()
    for e, ms in zip(idle, (0, 1, 3, 10), strict=True):
        assert e.argv() == [*base.split(), "--pause", str(ms)]
        assert not e.in_quick() and e not in experiments(quick=True, gpus=2)  # the quick budget
        assert e.min_gpus == 1 and dict(e.env) == {} and f"after a {ms} ms pause" in e.what
        spec = spec_from_args(parser.parse_args([*e.argv(), "--out", "a.csv"]))
        assert spec.pause_ms == float(ms) and spec.sizes == (4096, 65536, 2**20)
        assert spec.planned_rows() == 2 * 3 * 42
        # measured: the pause itself is part of each run's wall time (252 copies x the pause)
        assert e.seconds > spec.planned_rows() * ms / 1e3


def test_time_budget_on_an_h200():
    # one GPU: the full plan within 8 1/3 minutes, so that a 10-minute device call also holds
    # CUDA start-up and a benchmark; --quick in 2.5; two GPUs add the concurrent run, within
    # issue 13's 10 and 3. The one-GPU bound was 450 s (7.5 min) for plan 2, measured at 380 s
    # on VM build fc-v657; plan 3 adds the idle kind (25 s measured) and was measured at 480 s
    # on build fc-v973, which ran host-memory work slower (its device call took 496 s of 600).
    # Raised deliberately to 500 s, not to hide a slower plan: the plan measured what it measured.
    # Then to 530 s: since 250f304 every CUDA run ends with a one-second stall census (issue 17's
    # evidence for host_stall), 19 s more by design; that recording measured 508 s (the device
    # call 518 s of its 600).
    assert total_seconds(experiments(gpus=1)) <= 530
    assert total_seconds(experiments(gpus=2)) <= 600
    assert total_seconds(experiments(quick=True, gpus=1), quick=True) <= 150
    assert total_seconds(experiments(quick=True, gpus=2), quick=True) <= 180


def test_full_plan_thins_the_forum_grid_evenly_and_keeps_the_question_pair():
    from h2dlab.recording.plan import FORUM_PAIR
    from h2dlab.units import forum_nbytes

    parser = build_parser()

    def sizes(run):
        e = next(x for x in PLAN if x.run == run)
        return list(spec_from_args(parser.parse_args([*e.argv(), "--out", "a.csv"])).sizes)

    grid = forum_sizes()
    pair = {forum_nbytes(s) for s in FORUM_PAIR}
    every_third = sizes("forum-sizes")
    assert every_third == grid[1::3] and len(every_third) == 70 and pair <= set(every_third)
    assert max(every_third) >= grid[-3]  # spans the grid to within one step of its top
    # the pin_then_copy runs share one grid (findings.host_alloc_growth matches sizes across them)
    alloc = [sizes(r) for r in ("pin-warm", "pin-emptied", "pin-register-emptied")]
    assert alloc[0] == alloc[1] == alloc[2] == grid[1::2] and len(alloc[0]) == 105
    assert pair <= set(alloc[0]) and alloc[0] == sorted(alloc[0]) and max(alloc[0]) == grid[-1]
    # a size just above each power of two from 16 MiB on is still measured (the allocator's classes)
    for block_mib in (16, 32, 64, 128, 256):
        assert any(block_mib * 2**20 < n < block_mib * 2**20 * 1.1 for n in alloc[0]), block_mib


def test_concurrent_only_with_two_gpus():
    assert "concurrent" not in {e.kind for e in experiments(gpus=1)}
    assert "concurrent" in {e.kind for e in experiments(gpus=2)}


def test_quick_forum_grid_is_capped_but_crosses_four_block_sizes():
    parser = build_parser()
    e = next(x for x in PLAN if x.run == "pin-warm")
    sizes = spec_from_args(parser.parse_args([*e.argv(True), "--out", "a.csv"])).sizes
    assert max(sizes) <= QUICK_CAP_BYTES and list(sizes) == [n for n in forum_sizes() if n <= QUICK_CAP_BYTES]
    for block_mib in (16, 32, 64, 128):  # a size just above each power of two is measured
        assert any(block_mib * 2**20 < n < block_mib * 2**20 * 1.1 for n in sizes)


def test_select_by_run_kind_or_name():
    exps = experiments(gpus=1)
    assert [e.run for e in select(exps, "pow2-interleaved,overlap")] == ["pow2-interleaved", "overlap"]
    assert [e.run for e in select(exps, "sweep/forum-sizes")] == ["forum-sizes"]
    assert len(select(exps, "forum")) == 3
    with pytest.raises(ValueError, match="no experiment named 'nope'"):
        select(exps, "nope")


def test_show_args_shortens_long_lists():
    e = next(x for x in PLAN if x.run == "pin-warm")
    text = show_args(e.argv(True))
    assert "<73 values, 393216..141950976>" in text and len(text) < 200


def test_experiment_round_trip_and_bad_names():
    e = next(x for x in PLAN if x.run == "pin-register-emptied")
    back = experiment_from_dict(e.to_dict(quick=True))
    assert back.argv() == e.argv(True) and dict(back.env) == dict(e.env)
    with pytest.raises(ValueError, match="bad kind/run"):
        experiment_from_dict({"kind": "sweep", "run": "../x", "args": ["measure"]})
    with pytest.raises(ValueError, match="needs kind, run and args"):
        experiment_from_dict({"kind": "sweep"})


def test_data_readme_states_the_plan_totals():
    text = (Path(__file__).resolve().parents[2] / "data" / "README.md").read_text()
    full = [round(total_seconds(experiments(gpus=g))) for g in (1, 2)]
    quick = [round(total_seconds(experiments(quick=True, gpus=g), quick=True)) for g in (1, 2)]
    assert f"**{full[0]} / {full[1]}**" in text and f"**{quick[0]} / {quick[1]}**" in text
    for e in PLAN:
        assert f"`{e.kind}/{e.run.split('-')[0]}" in text, e.name


def test_data_readme_plan_table_states_each_runs_estimate():
    # every row of data/README.md's plan table quotes the plan's own seconds (full, --quick)
    text = (Path(__file__).resolve().parents[2] / "data" / "README.md").read_text()
    rows = {ln.split(" | ")[0].strip("| `").split("`")[0]: ln.split(" | ") for ln in text.splitlines()}
    for e in PLAN:
        cells = rows[e.name]
        est = " (est.)" if e.min_gpus > 1 or e.name in NOT_RECORDED_YET else ""
        full, quick = (
            (f"{e.seconds:.1f}", f"{e.quick_seconds:.1f}")
            if not est
            else (f"{e.seconds:.0f}", f"{e.quick_seconds:.0f}")
        )
        assert cells[2] == full + est, (e.name, cells[2])
        assert cells[4].rstrip(" |") == (quick + est if e.in_quick() else "–"), (e.name, cells[4])


def test_quick_forum_runs_keep_the_forums_question_pair():
    import inspect

    from h2dlab.findings.forum_claims import size_pair
    from h2dlab.recording.plan import FORUM_PAIR

    defaults = inspect.signature(size_pair).parameters
    assert FORUM_PAIR == (defaults["small"].default, defaults["large"].default)
    parser = build_parser()
    for e in experiments(quick=True):
        if e.kind == "forum":
            seqs = spec_from_args(parser.parse_args([*e.argv(True), "--out", "a.csv"])).seqs
            assert set(FORUM_PAIR) <= set(seqs) and len(seqs) == 75


def test_data_readme_quotes_the_other_threads_window_of_the_bundled_recording():
    """data/README.md says the bundled recording's others_window_ms runs a median 0.19 ms
    past wall_ms in forum, against 0.13 ms in h200_omp, and that the measure runs' light loop
    leaves the column empty: recomputed here."""
    from h2dlab.recording import sources

    text = (Path(__file__).resolve().parents[2] / "data" / "README.md").read_text()
    said = " ".join(text.split())
    for source, words in (
        ("h200:forum", "ms in `forum`, against"),
        ("h200_omp", "ms in the schema-4 `h200_omp`"),
    ):
        df = sources.load(source)
        over = (df["others_window_ms"] - df["wall_ms"]).dropna().median()
        assert f"{over:.2f} {words}" in said, (source, over)
    assert sources.load("h200:sweep")["others_window_ms"].isna().all()
    assert "light loop (schema 6) leaves the other-thread columns empty" in said


def test_retired_runs_have_no_tables_in_the_bundled_recording():
    """record_h200.sh removes the retired runs' tables; data/README.md says so."""
    root = Path(__file__).resolve().parents[2] / "data"
    said = " ".join((root / "README.md").read_text().split())
    for kind, run in RETIRED:
        assert not (root / "h200" / kind / f"{run}.csv.gz").exists(), (kind, run)
        assert f"`{kind}/{run}`" in said, (kind, run)
    assert "have no tables in `data/h200`" in said


def test_record_on_cpu_plans_only_strategies_a_cpu_runs(capsys):
    """`h2dlab record --device cpu` planned forum-sizes with pinned_reuse, which measure
    refuses on cpu: the recording always ended with a failed experiment."""
    assert cli.main(["record", "--device", "cpu", "--dry-run"]) == 0
    plan = capsys.readouterr().out
    lists = re.findall(r"--strategies (\S+)", plan)
    assert lists, plan  # the plan does name strategies (forum-sizes)
    for names in lists:
        assert names, plan
        for name in names.split(","):
            assert not REGISTRY[name].needs_cuda, (name, plan)
