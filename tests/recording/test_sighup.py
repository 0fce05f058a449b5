"""SIGHUP (a closed terminal or ssh session) stops ``record`` and ``report`` as SIGTERM does
(issue #35). Before: ``record`` died and its experiment, in a session of its own, ran on
orphaned and stayed "pending" in recording.json; ``report`` died and left its kernel and the
kernel's connection file behind. Recordings here are SYNTHETIC (``--device cpu``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbclient
import pytest

from h2dlab.cli import main as cli
from h2dlab.recording.folder import read_manifest
from h2dlab.show import report

ROOT = Path(__file__).resolve().parents[2]
# --pause 5: the light loop copies 1 KiB in microseconds; a stop must land mid-run, not after it
SLOW = {"kind": "sweep", "run": "slow", "args": ["measure", "--sizes", "1KiB..64KiB", "--reps", "100", "--warmup", "0", "--strategies", "pageable", "--pause", "5"], "seconds": 9}  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) is gone for this purpose
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


def _children_of(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().split(")")[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, ValueError, IndexError):
                pass
    return out


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to find the experiment's process")
def test_sighup_to_record_stops_its_experiment_and_keeps_its_rows(tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps([SLOW]))
    folder = tmp_path / "rec"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("H2DLAB_DEBUG", None)
    p = subprocess.Popen(
        [sys.executable, "-m", "h2dlab.cli.main", "record", "--device", "cpu", "--plan", str(tmp_path / "plan.json"),
         "--out", str(folder)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    partial = folder / "sweep" / "slow.csv.gz.partial.csv"
    deadline, child = time.time() + 120, None
    while time.time() < deadline and p.poll() is None:
        if partial.exists() and len(partial.read_text().splitlines()) > 5:
            child = next(iter(_children_of(p.pid)), None)
            p.send_signal(signal.SIGHUP)
            break
        time.sleep(0.05)
    _, err = p.communicate(timeout=120)
    assert child is not None, err
    assert p.returncode == 130, err
    for _ in range(100):  # the experiment stops after its copy in flight
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child), "the experiment was orphaned"
    m = read_manifest(folder)
    assert [(r["name"], r["status"]) for r in m["experiments"]] == [("sweep/slow", "interrupted")]
    kept = len(__import__("h2dlab.recording.datasets").datasets.read(folder / "sweep" / "slow.csv.gz"))
    assert 5 < kept < 700


def test_sighup_to_report_shuts_its_kernel_down(monkeypatch, tmp_path, capsys):
    gone, stopped = threading.Event(), []

    def execute(self, **kw):  # noqa: ARG001
        signal.pthread_kill(threading.main_thread().ident, signal.SIGHUP)
        assert gone.wait(5), "the kernel was never shut down"

    monkeypatch.setattr(nbclient.NotebookClient, "execute", execute)
    monkeypatch.setattr(report, "_stop_kernel", lambda km: (stopped.append(km), gone.set()))
    code = cli.main(["report", "--outdir", str(tmp_path / "r"), "--only", "04-pinned-memory-primer"])
    err = capsys.readouterr().err
    assert code == 130 and err.strip().splitlines()[-1] == "h2dlab: interrupted"
    assert len(stopped) == 1  # shut down: jupyter_client removes the connection file then
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL  # given back


def test_a_real_kernel_shut_down_by_sighup_leaves_no_connection_file(tmp_path, monkeypatch):
    """The real kernel manager: after report's stop, its connection file is gone."""
    jupyter_client = pytest.importorskip("jupyter_client")
    km = jupyter_client.KernelManager(kernel_name="python3")
    km.connection_file = str(tmp_path / "kernel-test.json")
    try:
        km.start_kernel()
    except Exception as exc:  # noqa: BLE001 - no kernel here: nothing to check
        pytest.skip(f"no python3 kernel: {exc}")
    assert Path(km.connection_file).exists()
    report._stop_kernel(km)
    assert not Path(km.connection_file).exists()
