"""hostile6: recording.json is a data file anyone can plant in a shared folder. The table and
env.json readers refuse what is not a regular file (tableio: "a link to /dev/zero never
ends"), but ``folder.read_manifest`` and ``folder.load`` read recording.json with
``read_text()`` whole: a link to /dev/zero filled memory (MemoryError under a 1.5 GB limit,
the machine's memory without one) and a FIFO blocked forever. ``is_recording`` asks this of
every folder above an ``--out``, so ``h2dlab measure --out FOLDER/sweep/t.csv`` and
``h2dlab record --resume FOLDER`` both did. Such a recording.json should read as none
(``read_manifest``) or be refused in one line (``load``)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT_BYTES = 1_500_000_000


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def _run(code: str, folder: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code, str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        preexec_fn=_limited,
    )


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    folder = tmp_path / "rec"
    (folder / "sweep").mkdir(parents=True)
    (folder / "recording.json").symlink_to("/dev/zero")
    return folder


def test_read_manifest_of_a_recording_json_linked_to_dev_zero_reads_none(planted: Path) -> None:
    code = "import sys; from h2dlab.recording.folder import read_manifest; print(read_manifest(sys.argv[1]))"
    p = _run(code, planted)
    assert p.returncode == 0 and p.stdout.strip() == "None", p.stderr[-300:]


def test_record_resume_of_a_recording_json_linked_to_dev_zero_is_refused_in_one_line(planted: Path) -> None:
    code = "import sys; from h2dlab.cli.main import main; sys.exit(main(['record', '--resume', sys.argv[1]]))"
    p = _run(code, planted)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-300:]
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
