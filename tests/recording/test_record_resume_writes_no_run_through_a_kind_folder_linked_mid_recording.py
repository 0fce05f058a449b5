"""hostile9: b9bc080 refuses a kind folder that is a link, but only once, before the first run
(``record`` checks ``<folder>/<kind>.is_symlink()`` up front). A recording runs for many minutes;
a kind folder replaced by a link after that check (a user moving ``sweep`` to another disk and
linking it back, or anyone sharing the folder) is not looked at again: ``_child_command``
resolves the path, so the run writes into the link's target. Where that holds another
recording's finished table of the same ``<kind>/<run>`` without its reference check and the plan
asks ``--reference``, the run is forced (``--force``) over it. Data loss, nothing said. The race
is made deterministic here: the link is put in place just as the run is about to start."""

from __future__ import annotations

import os
import shutil

from h2dlab.cli.main import main
from h2dlab.recording import run as run_mod
from h2dlab.recording.folder import read_manifest, write_manifest
from tests.recording.test_record import _recording

MEASURE = ["measure", "--device", "cpu", "--sizes", "4KiB", "--reps", "3", "--warmup", "0"]
MEASURE += ["--strategies", "pageable", "--no-progress"]


def test_resume_leaves_another_recordings_table_behind_a_kind_folder_linked_after_the_check(
    tmp_path, monkeypatch
):
    theirs = tmp_path / "h200-2026-12-01" / "sweep" / "tiny.csv.gz"  # another recording's table
    theirs.parent.mkdir(parents=True)
    assert main([*MEASURE, "--out", str(theirs)]) == 0  # a real tiny CPU run, no --reference
    before = theirs.read_bytes()
    folder = _recording(tmp_path / "mine")  # SYNTHETIC recording of one tiny CPU sweep
    m = read_manifest(folder)
    m["experiments"][0]["args"].append("--reference")
    write_manifest(folder, m)
    real = run_mod.keep_orphan_env

    def link_then_keep(out, r):  # after record()'s up-front check, before the run starts
        kind = out.parent
        if not kind.is_symlink():
            shutil.rmtree(kind)
            os.symlink(os.path.join("..", "h200-2026-12-01", "sweep"), kind)
        return real(out, r)

    monkeypatch.setattr(run_mod, "keep_orphan_env", link_then_keep)
    try:
        main(["record", "--resume", str(folder)])
    except SystemExit:
        pass
    assert theirs.read_bytes() == before  # the other recording's table is not written over
