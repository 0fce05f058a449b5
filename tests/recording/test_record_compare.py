"""compare_machines.compare(): a recording beside the bundled H200 and the forum's A100,
each number checked against a computation of its own from the tables."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from h2dlab.findings import compare_machines
from h2dlab.recording import datasets, session
from h2dlab.recording.folder import write_manifest


@pytest.fixture(scope="module")
def refs():
    return compare_machines.compare()


def _get(t, machine, metric, strategy):
    row = t[(t.machine == machine) & (t.metric == metric) & (t.strategy == strategy)]
    assert len(row) == 1, (machine, metric, strategy)
    return row.iloc[0]


def test_columns_and_machines(refs):
    assert list(refs.columns) == compare_machines.COLUMNS
    assert set(refs.machine) == {"H200 (bundled)", "A100 (forum)"}
    assert set(refs.metric) <= set(compare_machines.METRICS)
    a100 = refs[refs.machine == "A100 (forum)"]
    assert set(a100.metric) == {"forum_bandwidth", "pin_cost", "growth_spikes", "growth_cost"}  # no sweep
    assert (a100.gpu == "NVIDIA A100").all()


def test_each_row_carries_the_day_its_runs_were_recorded(refs):
    rec = session.recording("h200")
    sweep, forum = rec.table("sweep", "pow2-interleaved"), rec.table("forum")

    def days(df):
        d = sorted({str(e.get("date") or "")[:10] for e in df.attrs["envs"].values()} - {""})
        return d[0] if len(d) == 1 else f"{d[0]} to {d[-1]}"

    h200 = refs[refs.machine == "H200 (bundled)"].set_index("metric")["date"]
    assert set(h200[["bandwidth", "small_copy"]]) == {days(sweep)}
    assert set(h200[["forum_bandwidth", "pin_cost"]]) == {days(forum)}
    assert days(sweep).startswith("20")  # a real day, from the env.json
    assert set(refs[refs.machine == "A100 (forum)"].date) == {""}  # the forum post gives none


def test_h200_bandwidth_at_1gib_is_the_median_copy(refs):
    # the same run as notebook 02's advice table and bandwidth figure (pow2-interleaved), so
    # the machines table never quotes a second GB/s for the same strategy and size
    pow2 = session.recording("h200").table("sweep", "pow2-interleaved")
    d = pow2[(pow2.strategy == "pinned_reuse") & (pow2.size_bytes == 2**30) & ~pow2.warmup]
    want = 2**30 / d.event_ms.median() / 1e6
    page = pow2[(pow2.strategy == "pageable") & (pow2.size_bytes == 2**30) & ~pow2.warmup]
    assert _get(refs, "H200 (bundled)", "bandwidth", "pageable").value == pytest.approx(
        2**30 / page.event_ms.median() / 1e6
    )
    small = pow2[(pow2.size_bytes == 1024) & ~pow2.warmup & (pow2.strategy == "pinned_reuse")]
    assert _get(refs, "H200 (bundled)", "small_copy", "pinned_reuse").value == pytest.approx(
        small.event_ms.median() * 1000
    )
    got = _get(refs, "H200 (bundled)", "bandwidth", "pinned_reuse")
    assert got.value == pytest.approx(want) and got.size_bytes == 2**30 and got.unit == "GB/s"
    assert 50 < got.value < 64  # PCIe Gen5 x16 pinned: ~55 GB/s, under the 63 GB/s of the link
    assert got.lo <= got.value <= got.hi
    assert _get(refs, "H200 (bundled)", "bandwidth", "pageable").value < got.value / 3


def test_a100_numbers_from_the_published_table(refs):
    raw = pd.read_csv(datasets.DATA_DIR / "forum_a100" / "forum_a100.csv")
    last = raw.iloc[-1]
    top = 24 * 2 * 1046 * 4096 * 2
    got = _get(refs, "A100 (forum)", "forum_bandwidth", "pinned_to_cuda")
    assert got.size_bytes == top and got.value == pytest.approx(top / last["pinned->cuda(ms)"] / 1e6)
    seqs = np.arange(1, 1047, 5)
    sizes = seqs * 24 * 2 * 4096 * 2
    big = sizes >= 64 * 2**20
    want = np.median(raw["pin-memory(ms)"].to_numpy()[big] / (sizes[big] / 2**30))
    assert _get(refs, "A100 (forum)", "pin_cost", "pin_memory").value == pytest.approx(want)
    # the allocator rule, counted independently: one new block per power-of-two class reached
    classes = {int(2 ** np.ceil(np.log2(n))) for n in sizes}
    assert _get(refs, "A100 (forum)", "growth_spikes", "pin_memory").value == len(classes) == 9


def test_a_recording_folder_joins_the_references(tmp_path, refs):
    folder = tmp_path / "mybox"
    for kind, src in (("sweep", "h200_sweep/pow2-interleaved"), ("forum", "h200_forum/shuffled-1")):
        (folder / kind).mkdir(parents=True)
        run = src.split("/")[1]
        for suffix in (".csv.gz", ".env.json"):
            shutil.copy(datasets.DATA_DIR / f"{src}{suffix}", folder / kind / f"{run}{suffix}")
    write_manifest(folder, {"hostname": "box", "gpu_name": "NVIDIA H200", "status": "complete"})
    t = compare_machines.compare(session.recording(str(folder), environ={}), label="mine")
    assert list(t.machine.unique()) == ["mine", "H200 (bundled)", "A100 (forum)"]
    mine = t[t.machine == "mine"]
    assert set(mine.metric) == {
        "bandwidth",
        "small_copy",
        "forum_bandwidth",
        "pin_cost",
    }  # shuffled: no growth
    pr = _get(t, "mine", "bandwidth", "pinned_reuse")
    d = datasets.read(folder / "sweep" / "pow2-interleaved.csv.gz")
    d = d[(d.strategy == "pinned_reuse") & (d.size_bytes == 2**30) & ~d.warmup]
    assert pr.value == pytest.approx(2**30 / d.event_ms.median() / 1e6)
    assert len(t[t.machine != "mine"]) == len(refs)
