"""benchmarks/README.md's recorded figures and README.md's fast-path limit say what the recorded
benchmark files say: every table row and sentence is rebuilt here from
benchmarks/results/h200.json (16-core host) and h200x2.json (32-core host) and must appear,
exactly, in its file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from h2dlab.recording import datasets
from h2dlab.units import fmt_bytes

ROOT = Path(__file__).resolve().parents[2]
HOSTS = {"h200": "16-core", "h200x2": "32-core"}
GRID_SIZES = [2**20, 4 * 2**20, 8 * 2**20, 32 * 2**20, 256 * 2**20, 2**30, 4 * 2**30]
MIB = 2**20


def _size(n: int) -> str:
    return fmt_bytes(n, compact=True)


def _row(b: dict, method: str, size: int) -> dict:
    return next(r for r in b["rows"] if r["method"] == method and r["size_bytes"] == size)


def _settings(s: dict) -> str:
    return (
        f"{s['engine']} engine, {s['threads']} thread × {s['chunk_bytes'] // MIB} MiB × {s['slots']} slots, "
        f"smallest chunk {s['min_step_bytes'] // MIB} MiB, split {s['head_split']}/{s['tail_split']}, "
        f"staged from {s['min_bytes'] // MIB} MiB up"
    )


def recorded_lines(bench: dict[str, dict]) -> list[str]:
    """The lines of benchmarks/README.md's "Recorded results" that carry numbers."""
    lines = []
    for name, b in bench.items():
        e = b["env"]
        lines.append(
            f"| {HOSTS[name]} | `results/{name}.json` | {e['git_commit'][:7]} | {e['date'][:16].replace('T', ' ')} UTC "
            f"| {e['cpu_affinity']} | {b['elapsed_s']:.0f} s | {_settings(b['settings'])} "
            f"| {b['fastpath_overhead_us']['added_us_median']:.2f} µs |"
        )
    for size in GRID_SIZES:
        cells = []
        for b in bench.values():
            td, to = _row(b, "to_device", size), _row(b, "to", size)
            cells.append(
                f"{td['gbps_median']:.1f} | {to['gbps_median']:.1f} | {td['ratio_vs_to']:.2f}x "
                f"| {_row(b, 'pinned_reuse', size)['gbps_median']:.1f}"
            )
        lines.append(f"| {_size(size)} | " + " | ".join(cells) + " |")
    for name, b in bench.items():
        for r in b["bounds"]:
            lines.append(
                f"| {HOSTS[name]} | {_size(r['size_bytes'])} | {r['to_device_gbps']:.1f} "
                f"| {r['upper_gbps']:.1f} ({r['host_alone_gbps']:.1f}, {r['dma_alone_gbps']:.1f}) "
                f"| {r['lower_gbps']:.1f} ({r['host_under_dma_gbps']:.1f}, {r['dma_under_host_gbps']:.1f}) "
                f"| {r['frac_of_upper']:.2f} | {r['frac_of_lower']:.2f} |"
            )
    whats = [t["what"] for t in bench["h200"]["targets"]]
    for what in whats:
        cells = []
        for b in bench.values():  # a target added since a host's file was made: "–" there
            t = next((t for t in b["targets"] if t["what"] == what), None)
            cells.append("–" if t is None else f"{t['value']:.2f} {'pass' if t['ok'] else '**miss**'}")
        t = next(t for t in bench["h200"]["targets"] if t["what"] == what)
        lines.append(f"| {what} | {t['op']} {t['target']:.2f} | " + " | ".join(cells) + " |")
    for name, b in bench.items():
        for size in sorted({r["size_bytes"] for r in b["repeated"]}):
            g = {r["method"]: r["gbps_median"] for r in b["repeated"] if r["size_bytes"] == size}
            order = ("to", "to_device", "pin_then_to", "tensordict", "stager", "stager_non_blocking")
            lines.append(
                f"| {HOSTS[name]} | {_size(size)} | " + " | ".join(f"{g[m]:.1f}" for m in order) + " |"
            )
    return lines


def fastpath_limit(bench: dict[str, dict]) -> str:
    """README.md's sentence on what to_device reaches (its "Limits" list)."""
    one, two = (_row(bench[n], "to_device", 2**30) for n in ("h200", "h200x2"))
    peak = _row(bench["h200"], "pinned_reuse", 2**30)["gbps_median"]
    b = {r["size_bytes"]: r for r in bench["h200"]["bounds"]}
    below = [s for s in sorted(b) if s >= 2**30 and b[s]["frac_of_lower"] < 1]
    text = (
        f"`to_device` reached {one['gbps_median']:.1f} GB/s at 1 GiB on the 16-core H200 host "
        f'({one["ratio_vs_to"]:.2f}x `x.to("cuda")`) and {two["gbps_median"]:.1f} GB/s on a 32-core one '
        f"({two['ratio_vs_to']:.2f}x), against {peak:.1f} GB/s from a reused pinned buffer"
    )
    if below:
        text += (
            "; on the 16-core host it stays under the lower bound of a staged copy at "
            + " and ".join(_size(s) for s in below)
            + " ("
            + " and ".join(f"{b[s]['frac_of_lower']:.2f}" for s in below)
            + " of it"
        )
    return text


@pytest.fixture(scope="module")
def bench():
    return {name: datasets.load_benchmark(name) for name in HOSTS}


def test_benchmarks_readme_states_the_recorded_figures(bench):
    text = (ROOT / "benchmarks" / "README.md").read_text()
    section = text[text.index("## Recorded results") :]
    section = section[: section.index("\n## ", 4)] if "\n## " in section[4:] else section
    for line in recorded_lines(bench):
        assert line in section.splitlines(), f"benchmarks/README.md should have the line {line!r}"


def test_benchmarks_readme_has_no_unchecked_number_in_its_tables(bench):
    text = (ROOT / "benchmarks" / "README.md").read_text()
    section = text[text.index("## Recorded results") :]
    expected = set(recorded_lines(bench))
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and re.search(r"\d", ln)]
    for ln in rows:
        header = not re.search(r"\d+\.\d", ln)  # header rows name sizes and hosts only
        assert header or ln in expected, f"a table row no test computes: {ln!r}"


def test_readme_fast_path_limit_matches_the_benchmark(bench):
    text = (ROOT / "README.md").read_text()
    assert fastpath_limit(bench) in " ".join(text.split()), fastpath_limit(bench)


def test_the_lines_follow_the_files(bench):
    # the rebuilt lines move with the data: a changed figure changes its line
    changed = {k: dict(v) for k, v in bench.items()}
    changed["h200"]["bounds"] = [
        dict(r, to_device_gbps=r["to_device_gbps"] + 1) for r in bench["h200"]["bounds"]
    ]
    assert set(recorded_lines(changed)) != set(recorded_lines(bench))
    under = any(r["frac_of_lower"] < 1 for r in bench["h200"]["bounds"] if r["size_bytes"] >= 2**30)
    assert ("lower bound" in fastpath_limit(bench)) == under
    changed["h200"]["bounds"] = [dict(r, frac_of_lower=1.1) for r in bench["h200"]["bounds"]]
    assert "lower bound" not in fastpath_limit(changed)


def test_benchmarks_readme_says_which_half_is_the_lower_bound(bench):
    # the sentence that names the DMA under host copies as the lower bound everywhere holds only
    # when every bound row of both files says so
    text = " ".join((ROOT / "benchmarks" / "README.md").read_text().split())
    claim = "the DMA under host copies is the lower of the two at every size on both hosts"
    everywhere = all(r["lower_is"] == "dma_under_host" for b in bench.values() for r in b["bounds"])
    assert (claim in text) == everywhere
    if not everywhere:  # the README names the host and sizes where the host copy is the lower
        for name, b in bench.items():
            host = [_size(r["size_bytes"]) for r in b["bounds"] if r["lower_is"] == "host_under_dma"]
            said = f"on the {HOSTS[name]} host the host copy under DMA is the lower at {' and '.join(host)}"
            assert (said in text) == bool(host), said
            if not host:
                assert f"at every size on the {HOSTS[name]} host" in text
