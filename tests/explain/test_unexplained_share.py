"""Issue 17's measure of done, on the real tables: how many of the bundled H200 recording's
flagged forum and sweep copies (data/h200, table schema 5 with the per-copy evidence) stay
`unexplained`, computed as a reader would and as factors.unexplained says it; what each such
copy rules out; and the recordings made before the evidence columns (schema 1) still load and
explain."""

import pytest

from h2dlab.explain import outliers
from h2dlab.explain.causes import CAUSES
from h2dlab.findings import factors
from h2dlab.recording import datasets, session
from h2dlab.recording.schema import ADDED_V4, ADDED_V5


@pytest.fixture(scope="module")
def bundled():
    rec = session.recording("h200", mode="replay", environ={})
    return {kind: outliers.explain(rec.table(kind)) for kind in ("forum", "sweep")}


@pytest.mark.parametrize("kind", ["forum", "sweep"])
def test_the_unexplained_share_is_what_a_reader_counts(bundled, kind):
    e = bundled[kind]
    flagged = e[e["is_outlier"]]
    unexplained = int((flagged["cause"] == "unexplained").sum())
    assert len(flagged) >= 10, kind  # a share of a handful would say little
    f = factors.unexplained(e)
    assert (f["unexplained"], f["flagged"]) == (unexplained, len(flagged))
    assert f.holds == (unexplained <= 0.20 * len(flagged))
    assert f.verdict.startswith(
        f"{unexplained} of {len(flagged)} flagged copies ({unexplained / len(flagged):.0%})"
    )
    # Every flagged copy has a cause from the fixed vocabulary and an evidence sentence.
    assert flagged["cause"].isin(list(CAUSES)).all()
    assert flagged["evidence"].str.len().gt(20).all()


def test_the_forum_re_runs_meet_the_target_and_the_sweep_does_not(bundled):
    """The recording at commit b95e09d: forum 1 of 36 unexplained; sweep 10 of 18, every one
    of them a host-side copy (pin_then_copy or staged) of pow2-interleaved's last 7 s. The one at
    66f20f2: forum 1 of 31; sweep 5 of 14, the same kind of copies, in the same run's last 15 %.
    The one at d332ea1: forum 1 of 62; sweep 12 of 29: 8 copies that pin or stage on the host
    (pin_then_copy, host_register, staged) in pow2-interleaved's last 16 %, and 4 pageable copies
    of forum-sizes. The one at 5cb3034: forum 0 of 32; sweep 11 of 28, all in pow2-interleaved's
    last 18 %, of five strategies, two of them small pinned_reuse copies whose time went to the
    host's issue of the copy (0.17 of 0.19 ms, 0.08 of 0.09 ms). What holds in all four: the
    forum re-runs meet the target, the sweep does not, and its unexplained copies come late in
    the interleaved run, or are pageable copies of forum-sizes."""
    assert factors.unexplained(bundled["forum"]).holds
    e = bundled["sweep"]
    u = e[e["is_outlier"] & (e["cause"] == "unexplained")]
    assert not factors.unexplained(e).holds and len(u) >= 1
    names = e.attrs["run_names"]
    late = u[u["run_id"].map(names) == "pow2-interleaved"]
    assert len(late)
    run = e[e["run_id"] == late["run_id"].iloc[0]]
    assert late["t_s"].min() - run["t_s"].min() >= 0.7 * (run["t_s"].max() - run["t_s"].min())
    rest = u[u["run_id"].map(names) != "pow2-interleaved"]
    assert set(rest["run_id"].map(names)) <= {"forum-sizes"} and set(rest["strategy"]) <= {"pageable"}


@pytest.mark.parametrize("kind", ["forum", "sweep"])
def test_the_new_runs_carry_the_evidence_on_every_cuda_copy(bundled, kind):
    e = bundled[kind]
    envs = e.attrs["envs"]
    new = [rid for rid, env in envs.items() if env.get("schema_version", 1) >= 5]
    assert new, kind
    rows = e[e["run_id"].isin(new) & (e["error"] == "")]
    # since schema 6 a measure run's light loop (spec evidence "light", schema.py) leaves the SM
    # clock, the GPU's processes and the other threads' columns empty; a full one records them
    light = [rid for rid in new if (envs[rid].get("spec") or {}).get("evidence") == "light"]
    for column in ("minflt", "majflt", "cpu_ms", "gc_count"):
        assert rows[column].notna().all(), (kind, column)
    full = rows[~rows["run_id"].isin(light)]
    for column in ("sm_clock_mhz", "gpu_procs", *ADDED_V4, *ADDED_V5):
        assert full[column].notna().all(), (kind, column)
        if column != "busiest_thread":
            assert rows.loc[rows["run_id"].isin(light), column].isna().all(), (kind, column)
    # CPU time of the timing thread cannot exceed the copy's wall time by more than the
    # two clocks' granularity (a few microseconds, and rounding in the stored table). One copy
    # of the recording of 66f20f2 broke it (forum/ascending-2 order 565, pinned_to_cuda, 370 MB:
    # 8.51 ms of thread CPU time in 8.03 ms of wall time; cause not known); none of d332ea1's does.
    over = rows[rows["cpu_ms"] > rows["wall_ms"] * 1.05 + 0.05]
    named: set = set()
    got = {(r.run_id, int(r.order), r.strategy, int(r.size_bytes)) for r in over.itertuples()}
    assert got == (named if len(rows) else set()), over[["run_id", "order", "wall_ms", "cpu_ms"]]
    # One thread's wait is part of all the others' wait. (No bound against others_window_ms:
    # since 515ea1d the waits are read before and after that window, to keep their ~0.35 ms
    # reads out of it, so a wait spans the window plus those reads; on the recording of
    # 2026-12-03 two forum copies' longest waits ran 0.47 and 0.88 ms past the window.)
    assert (full["longest_wait_ms"] <= full["others_wait_ms"] + 1e-6).all()


def test_each_unexplained_copy_of_the_new_runs_says_what_was_ruled_out(bundled):
    for kind, e in bundled.items():
        for text in e.loc[e["is_outlier"] & (e["cause"] == "unexplained"), "evidence"]:
            for check in ("page faults", "CPU time", "GC", "SM clock", "other process"):
                assert check in text, (kind, check, text)
            # the other threads' waits: read by a full loop, said not checked by a light one
            assert "waited to run" in text or "so not checked: the SM clock, other processes" in text


@pytest.mark.parametrize(
    ("name", "flagged", "unexplained"),
    [("h200_sweep", 31, 30), ("h200_forum", 51, 15), ("forum_a100", 109, 43)],
)
def test_the_recordings_before_the_evidence_still_load_and_explain(name, flagged, unexplained):
    df = datasets.load(name)
    if name != "forum_a100":
        assert {env["schema_version"] for env in df.attrs["envs"].values()} == {1}
    e = outliers.explain(df)
    f = e[e["is_outlier"]]
    assert (len(f), int((f["cause"] == "unexplained").sum())) == (flagged, unexplained)
    assert f["cause"].isin(list(CAUSES)).all() and f["evidence"].str.len().gt(20).all()


def test_an_unexplained_copy_of_an_old_table_names_the_checks_it_could_not_make():
    e = outliers.explain(datasets.load("h200_sweep"))
    texts = e.loc[e["is_outlier"] & (e["cause"] == "unexplained"), "evidence"]
    said = (
        "; not recorded for it, so not checked: page faults, the thread's CPU time, garbage "
        "collections, the SM clock, other processes on the GPU; host time since"
    )
    assert len(texts) == 30 and texts.str.contains(said, regex=False).all()
    # A copy whose table has a check does not name it as not made; one column dropped is.
    # (h200_batch: its loop reads every check; since schema 6 h200_d2h, a measure run, reads
    # no SM clock.)
    new = outliers.explain(datasets.load("h200_batch"))
    texts = new.loc[new["is_outlier"] & (new["cause"] == "unexplained"), "evidence"]
    assert len(texts) and not texts.str.contains("not checked").any()
    gone = outliers.explain(datasets.load("h200_batch").drop(columns="gc_count"))
    for text in gone.loc[gone["is_outlier"] & (gone["cause"] == "unexplained"), "evidence"]:
        assert (
            "; no GC;" not in text and "; not recorded for it, so not checked: garbage collections; " in text
        )


@pytest.mark.parametrize("kind", ["forum", "sweep"])
def test_host_parallel_finding_counts_as_a_reader_would(bundled, kind):
    from h2dlab.explain.causes_parallel import AS_USUAL, LAGGED

    e = bundled[kind]
    f = e[e["is_outlier"]]
    hp = f[f["cause"] == "host_parallel"]
    got = factors.host_parallel(e)
    same = int(hp["evidence"].str.contains(AS_USUAL, regex=False).sum())
    lagged = int(hp["evidence"].str.contains(LAGGED, regex=False).sum())
    assert same + lagged <= len(hp)  # a copy whose worker waited is no usual copy
    unexplained = int((f["cause"] == "unexplained").sum())
    assert (got["host_parallel"], got["flagged"], got["as_usual"], got["lagged"]) == (
        len(hp),
        len(f),
        same,
        lagged,
    )
    assert got["share_if_unexplained"] == pytest.approx((unexplained + same) / len(f))
    assert got.holds == ((unexplained + same) <= 0.2 * len(f))
    if lagged:
        assert (
            f"For {lagged} of the {len(hp)} one worker waited to run for at least half the extra"
            in got.verdict
        )
    if same:
        them = "it" if same == 1 else f"those {same}"
        assert (
            f"Counted as unexplained, {them} and the {unexplained} already unexplained would leave "
            f"{unexplained + same} of {len(f)}" in got.verdict
        )


def test_host_parallel_finding_without_such_copies():
    e = outliers.explain(datasets.load("forum_a100"))
    got = factors.host_parallel(e)
    assert got.holds == (int((e[e.is_outlier].cause == "unexplained").sum()) <= 0.2 * int(e.is_outlier.sum()))
    assert got.verdict == f"None of the {int(e.is_outlier.sum())} flagged copies is `host_parallel`."
