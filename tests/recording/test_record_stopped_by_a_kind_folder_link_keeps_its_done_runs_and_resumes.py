"""hostile10: a kind folder made a link between two runs stops the recording with one line
(exit 2). What it had recorded must stay noted (the run before: done; the runs after: pending,
never failed or done), the lock must be free, and once the link is removed a resume must record
exactly the runs left. SYNTHETIC recording of tiny CPU sweeps."""

from __future__ import annotations

import os

from h2dlab.cli.main import main
from h2dlab.recording import run as run_mod
from h2dlab.recording.folder import new_manifest, read_manifest, write_manifest


def _exp(kind: str, run: str) -> dict:
    args = ["measure", "--sizes", "1KiB", "--reps", "1", "--warmup", "0", "--strategies", "pageable"]
    return {"kind": kind, "run": run, "args": [*args, "--device", "cpu"], "env": {}, "seconds": 2,
            "fresh": False, "name": f"{kind}/{run}", "status": "pending"}  # fmt: skip


def test_a_recording_stopped_by_a_kind_folder_link_keeps_its_statuses_and_resumes(
    tmp_path, monkeypatch, capsys
):
    folder = tmp_path / "mine"
    folder.mkdir()
    runs = [_exp("sweep", "a"), _exp("other", "b"), _exp("other", "c")]
    write_manifest(folder, new_manifest(runs, quick=False, device="cpu", gpus=0, gpu_name=None, command="x"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    real = run_mod.write_manifest

    def link_after_the_first_run(f, m):  # between runs: after sweep/a is noted done
        out = real(f, m)
        if not (folder / "other").exists():
            os.symlink(elsewhere, folder / "other")
        return out

    monkeypatch.setattr(run_mod, "write_manifest", link_after_the_first_run)
    assert main(["record", "--resume", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("h2dlab: error: ") and "stopped before other/b (1 done)" in err[-1]
    m = read_manifest(folder)
    assert [e["status"] for e in m["experiments"]] == ["done", "pending", "pending"]
    assert m["status"] == "incomplete"
    assert list(elsewhere.iterdir()) == []  # nothing written through the link
    assert "== other/" not in (folder / "record.log").read_text()  # no child of other/ started
    monkeypatch.setattr(run_mod, "write_manifest", real)

    (folder / "other").unlink()
    before = (folder / "sweep" / "a.csv.gz").read_bytes()
    assert main(["record", "--resume", str(folder)]) == 0  # the lock was let go
    m = read_manifest(folder)
    assert [e["status"] for e in m["experiments"]] == ["done", "done", "done"]
    assert m["status"] == "complete"
    assert (folder / "sweep" / "a.csv.gz").read_bytes() == before  # the done run is not run again
    assert sorted(p.name for p in (folder / "other").glob("*.csv.gz")) == ["b.csv.gz", "c.csv.gz"]
