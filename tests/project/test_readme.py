"""README's "What it found" table says what the bundled recording says: every figure in it is
recomputed here with the same functions the notebooks use (h2dlab.findings.advice, findings,
forum_claims, factors) and must appear, formatted the same way, in its row."""

import re
from pathlib import Path

import pytest

from h2dlab.explain import idle as factors_idle
from h2dlab.explain import outliers
from h2dlab.findings import advice, factors, forum_claims
from h2dlab.findings import claims as findings
from h2dlab.findings import transfer as findings_transfer
from h2dlab.recording import datasets, session
from h2dlab.recording.env import PCIE_X16_GBPS
from h2dlab.units import fmt_bytes

README = Path(__file__).resolve().parents[2] / "README.md"


def found_table():
    text = README.read_text()
    section = text[text.index("## What it found") :]
    section = section[: section.index("\n## ", 4)]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| ---")]
    return {r.split(" | ")[0].strip("| "): r.split(" | ", 1)[1] for r in rows[1:]}


@pytest.fixture(scope="module")
def expected():
    # The bundled recording, read as the notebooks read it.
    rec = session.recording("h200", mode="replay", environ={})
    inter, reuse = rec.table("sweep", "pow2-interleaved"), rec.table("sweep", "forum-sizes")
    cold, forum = rec.table("allocator", "pin-emptied"), rec.table("forum")
    a = advice.advice(inter, 2**30, cold=cold).set_index("way")
    floor = advice.small_copy_floor(inter)
    growth = findings.host_alloc_growth(forum)
    conc = factors.concurrency(rec.table("concurrent"))["by_strategy"]
    runs = forum.run_id.nunique()
    eps = forum_claims.episodes(outliers.explain(datasets.load("forum_a100")))[
        "count"
    ]  # the forum's own table
    rows = {
        "pinned → GPU, 1 GiB, reused pinned buffer": [
            f"{a.loc['pinned_reuse', 'gbps']:.1f} GB/s median",
            f"Gen5 x16: {PCIE_X16_GBPS[5]:.0f} GB/s on paper",
        ],
        '`x.to("cuda")` from pageable memory, 1 GiB': [f"{a.loc['pageable', 'gbps']:.1f} GB/s"],
        '`x.pin_memory().to("cuda")`, 1 GiB': [
            f"{a.loc['pin_cached', 'gbps']:.1f} GB/s with its pinned block cached",
            f"{a.loc['pin_cold', 'gbps']:.1f} GB/s on its first call",
        ],
        "`h2dlab.transfer.to_device(x)` (staged), 1 GiB": [
            f"{a.loc['staged', 'gbps']:.1f} GB/s, {a.loc['staged', 'vs_pageable']:.1f}x"
        ],
        "pinning 1 GiB in place (`cudaHostRegister`)": [
            f"{advice.registering_cost(inter)['ms']['median']:.0f} ms, once"
        ],
        "the smallest copy (1 KiB)": [
            f"{floor['lo_us']:.0f}–{floor['hi_us']:.0f} µs by CUDA events",
            # which of the two quantities (issue #30): back to back, or after an idle gap
            {
                "back_to_back": f"copies back to back (a median {floor['gap_ms']:.2f} ms between them)",
                "after_idle_gap": f"each copy after an idle gap (a median {floor['gap_ms']:.1f} ms",
            }.get(floor["spacing"], "no start times"),
        ],
        "the forum's `pin_memory()` spikes": [
            f"{growth['new_blocks']} in {runs} re-runs, {growth['mismatches']} off the allocator's rule",
            f"{growth['ms_per_mib']['median']:.2f} ms per MiB",
        ],
        "`empty_cache()` in the forum's loop": [
            f"{findings.device_alloc_cost(forum, reuse)['ratio']['median']:.2f}x a copy into a reused device buffer"
        ],
        "the forum's decaying stretches": [
            f"{eps} episodes in time order in the A100 table",
            f"{forum_claims.episodes(outliers.explain(forum))['count']} in {runs} re-runs",
        ],
        "2 GPUs copying 1 GiB at once": [
            f"pinned {conc['pinned_reuse']['aggregate_gbps']:.1f} GB/s together "
            f"({conc['pinned_reuse']['scaling']:.2f}x one GPU)",
            f"staged {conc['staged']['aggregate_gbps']:.1f} GB/s ({conc['staged']['scaling']:.2f}x)",
        ],
    }
    if growth["faults_per_page"]["n"]:  # schema 2: page faults, the independent evidence of a new block
        rows["the forum's `pin_memory()` spikes"].append(
            f"{growth['faults_per_page']['median']:.2f} page faults of the whole process per 4 KiB page of the new block"
        )
    # Issue 16's kinds: a row each exactly when the recording has the data.
    if rec.has("d2h", "d2h"):  # the way back, timed beside two ways there in one run
        f = findings_transfer.direction_bandwidth(rec.table("d2h", "d2h"))
        rows["device → host, the fastest way back"] = [
            f"{f['d2h_gbps']:.1f} GB/s (`{f['best_d2h']}`"
            + (
                ", tied within 1 % with " + ", ".join(f"`{t}`" for t in f["tied_d2h"])
                if f["tied_d2h"]
                else ""
            )
            + f") at {fmt_bytes(f['size_bytes'], compact=True)}",
            f"{f['d2h_over_h2d']:.0%} of the fastest way there in the same run ({f['h2d_gbps']:.1f} GB/s)",
        ]
        b = findings_transfer.pageable_back(rec.table("d2h", "d2h"))
        if b.holds:  # `.cpu()` into new pageable memory, with its page faults
            rows["`y.cpu()` into new pageable memory"] = [
                f"{b['gbps_largest']:.1f} GB/s at {fmt_bytes(b['size_bytes'], compact=True)}",
                f'{b["vs_pageable"]:.2f}x `x.to("cuda")` from pageable memory in the same run ({b["pageable_gbps"]:.1f} GB/s)',
                f"from {fmt_bytes(b['from_bytes'], compact=True)} on",
                f"{b['faults_per_page']:.2f} page faults per 4 KiB page of its output",
            ]
    if rec.has("bidir"):
        f = findings_transfer.duplex_summary(rec.table("bidir"))
        rows["both directions at once"] = [
            f"{f['aggregate_gbps']:.1f} GB/s together at {fmt_bytes(f['size_bytes'], compact=True)} each way",
            f"{f['of_ideal']:.0%} of the two directions alone",
        ]
    if rec.has("batch", "equal"):
        from h2dlab.measure.names import PINNED_BEFOREHAND

        f = findings_transfer.best_batch_method(rec.table("batch", "equal"))
        note = (
            " (from tensors pinned beforehand: the pinning not timed)"
            if f["best"] in PINNED_BEFOREHAND
            else ""
        )
        rows["a batch of many small tensors"] = [
            f"{f['n_tensors']} tensors, {fmt_bytes(f['size_bytes'], compact=True)} in all",
            f"`{f['best']}`{note} {f['speedup']:.1f}x a loop of `.to()`",
        ]
        if f["runner_up_ms"] <= f["best_ms"] * 1.02:  # a runner-up within 2 %: named beside it
            rows["a batch of many small tensors"].append(
                f"`{f['runner_up']}`{' (also pinned beforehand)' if f['runner_up'] in PINNED_BEFOREHAND else ''} "
                f"within {f['runner_up_ms'] / f['best_ms'] - 1:.1%} of it"
            )
    if rec.has("idle"):
        f = factors.idle_wake(rec.table("idle"))
        c, p = f["cells"], f["pauses"]
        small = c[(c.strategy == "pinned_reuse") & (c.size_bytes == c.size_bytes.min())].set_index("pause_ms")
        between = small.loc[p[1:-1], "ratio"]
        gaps = f["gaps_ms"]
        rows["a small copy after a spell without copies"] = [
            f"a {fmt_bytes(small.size_bytes.iloc[0], compact=True)} `pinned_reuse` copy: "
            f"{small.loc[p[0], 'median_ms'] * 1e3:.0f} µs after a {p[0]:g} ms pause",
            f"{gaps[p[0]]:.1f} ms after the previous copy",
            f"{small.loc[p[-1], 'median_ms'] * 1e3:.0f} µs after a {p[-1]:g} ms pause",
            f"{gaps[p[-1]]:.1f} ms after the previous copy",
            f"{small.loc[p[-1], 'slow_share']:.0%} of copies at least {factors_idle.SLOW_RATIO:g}x",
            f"after {p[1]:g} to {p[-2]:g} ms pauses {between.min():.2f}x to {between.max():.2f}x",
        ]
        after = small.loc[p[1:], "ratio"]
        if (after > 1).all() and after.is_monotonic_increasing:  # the words beside the figures
            rows["a small copy after a spell without copies"].append(
                "in this recording slower after every pause, the more the longer the pause"
            )
    omp = factors.openmp_wait(datasets.load("h200_omp")).values
    d, p = omp["default"], omp["passive"]
    rows["slow copies no cause fits, and PyTorch's waiting threads"] = [
        f"other threads spin at a median {d['others_cpus']:.1f} CPUs' worth, {d['unexplained']} of {d['flagged']} "
        f"flagged copies unexplained ({d['host_parallel']} more `host_parallel`)",
        f"`OMP_WAIT_POLICY=PASSIVE`: {p['unexplained']} of {p['flagged']} unexplained, {p['host_blocked']} "
        "`host_blocked`",
        f"({max(p['flagged_by_run'].values())} of the {p['flagged']} from one run)",
        f"the median `{d['top']}` of {fmt_bytes(d['top_sizes'][0])} to {fmt_bytes(d['top_sizes'][1])} "
        f"{omp['slowdown'][0]:.1f}x to {omp['slowdown'][1]:.1f}x slower",
        f"{d['runs']} + {p['runs']} runs of one plan",
    ]
    return rows


def test_readme_found_table_matches_the_data(expected):
    table = found_table()
    assert set(table) == set(expected), "a README row without a computed check (or a check without its row)"
    for label, parts in expected.items():
        for part in parts:
            assert part in table[label], f"README row {label!r} should say {part!r}: {table[label]!r}"


def test_readme_found_table_has_no_unchecked_number(expected):
    for label, cell in found_table().items():
        checked = " ".join(expected[label])
        numbers = re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])", cell)
        assert all(n in checked for n in numbers), f"README row {label!r}: a number no test checks: {cell!r}"


def test_readme_compares_with_nvbandwidth_as_the_data_allows():
    """The sentence after the table quotes nvbandwidth's pinned figures (not recorded by the kit)
    and says which of the kit's agree: one way each within 3 %; both at once, agreeing or not."""
    text = " ".join(README.read_text().split())
    m = re.search(
        r"reads ([\d.]+) GB/s host→device and ([\d.]+) device→host .*?and ([\d.]+) \+ ([\d.]+) GB/s", text
    )
    h2d, d2h, both = float(m[1]), float(m[2]), float(m[3]) + float(m[4])
    rec = session.recording("h200", mode="replay", environ={})
    a = advice.advice(rec.table("sweep", "pow2-interleaved"), 2**30).set_index("way")
    back = findings_transfer.direction_bandwidth(rec.table("d2h", "d2h"))
    assert abs(a.loc["pinned_reuse", "gbps"] / h2d - 1) <= 0.03 and abs(back["d2h_gbps"] / d2h - 1) <= 0.03
    assert "the kit's one-way pinned figures above agree with it" in text
    together = findings_transfer.duplex_summary(rec.table("bidir"))["aggregate_gbps"]
    agrees = abs(together / both - 1) <= 0.03
    assert ("its figure for both directions at once falls short of it" in text) == (
        together < both and not agrees
    )
