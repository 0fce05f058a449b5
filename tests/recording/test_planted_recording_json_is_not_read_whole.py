"""hostile7: hostile6 refused a recording.json that is not a regular file (a link to
``/dev/zero``, a FIFO: read endlessly). A regular file of many gigabytes is still read whole
(``Path.read_text`` in ``folder.read_manifest`` and ``load_manifest``): ``truncate -s 3G
recording.json`` takes no disk and makes ``record --resume F --dry-run``, and any ``measure``
whose ``--out`` lies in ``F/sweep`` (``checks.not_into_data`` asks ``is_recording``), hold
gigabytes, then die with a MemoryError traceback (here under a 2.5 GB address-space limit; with
no limit, a larger file exhausts the machine's memory). A recording.json is a few kB; the kit
caps an env.json at 1 MiB. Security (memory exhaustion by a planted file) and a traceback."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

from tests.recording.test_record import ROOT

LIMIT_BYTES = 2_500_000_000  # the process's address space: a failure ends in MemoryError, not in swap


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def test_a_sparse_huge_recording_json_is_refused_in_one_line(tmp_path):
    folder = tmp_path / "sent"
    (folder / "sweep").mkdir(parents=True)
    with open(folder / "recording.json", "wb") as fh:
        fh.truncate(3 * 2**30)  # sparse: 3 GiB of NUL bytes, no disk used
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("H2DLAB_DEBUG", None)
    p = subprocess.run(
        [sys.executable, "-m", "h2dlab", "record", "--resume", str(folder), "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        preexec_fn=_limited,
    )
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr, p.stderr[-400:]
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (p.returncode, p.stderr[-400:])
