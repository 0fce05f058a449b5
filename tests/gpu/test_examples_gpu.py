"""The shipped examples run with plain ``python`` on a GPU and print sane numbers."""

import subprocess
import sys

from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "forum_corrected.py"


def test_forum_corrected_runs_and_its_numbers_are_sane():
    src = EXAMPLE.read_text()
    assert "empty_cache(" not in src.split('"""', 2)[2]  # never inside the experiment
    p = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert lines[0].split() == [
        "memory",
        "size_bytes",
        "event_ms_median",
        "event_ms_q1",
        "event_ms_q3",
        "host_ms_median",
        "GB/s",
    ]
    rows = {}
    for line in lines[1:]:
        kind, n, med, q1, q3, host, gbps = line.split()
        med, q1, q3, host, gbps = map(float, (med, q1, q3, host, gbps))
        assert 0 < q1 <= med <= q3, line
        assert host >= 0.9 * med, line  # the host clock around a synchronised copy includes the copy
        assert abs(gbps - int(n) / med / 1e6) <= 0.01 * gbps + 0.01, line
        rows[(kind, int(n))] = gbps
    sizes = sorted({n for _, n in rows})
    assert sizes == [2**k for k in range(10, 31, 4)] and len(rows) == 2 * len(sizes)
    big = sizes[-1]
    assert rows[("pinned", big)] > 1.5 * rows[("pageable", big)]  # pinned is faster at 1 GiB
    assert 5 < rows[("pinned", big)] < 200  # GB/s a PCIe or NVLink-C2C host link can give


def test_trace_one_copy_writes_a_chrome_trace_with_the_copy(tmp_path):
    import json

    out = tmp_path / "trace.json"
    script = ROOT / "examples" / "trace_one_copy.py"
    p = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    events = json.loads(out.read_text())["traceEvents"]
    names = {e.get("name", "") for e in events}
    assert any("Memcpy HtoD" in n for n in names), sorted(names)[:40]  # the copy engine's transfer
    assert any(n.startswith("aten::to") or n.startswith("aten::_to_copy") for n in names)
