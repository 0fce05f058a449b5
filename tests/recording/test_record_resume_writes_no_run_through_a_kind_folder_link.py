"""hostile8: 766c58c makes ``record --resume`` never write a run through a table link
(``<kind>/<run>.csv.gz`` a link), but the link can sit one level up: a kind folder that is a link
(``sweep -> ../h200-2026-12-01/sweep``, planted in a folder someone sent, unpacked beside the
user's own recordings). ``_child_command`` resolves the path, so the run writes into the link's
target, another recording's kind folder; where that holds a finished table of the same
``<kind>/<run>`` without its reference check and the plan asks ``--reference``, the run is forced
(``--force``) over it. Data loss: another recording's table overwritten, nothing said."""

from __future__ import annotations

import os

from h2dlab.cli.main import main
from h2dlab.recording.folder import read_manifest, write_manifest
from tests.recording.test_record import _recording

MEASURE = ["measure", "--device", "cpu", "--sizes", "4KiB", "--reps", "3", "--warmup", "0"]
MEASURE += ["--strategies", "pageable", "--no-progress"]


def test_resume_leaves_another_recordings_table_behind_a_kind_folder_link_untouched(tmp_path):
    theirs = tmp_path / "h200-2026-12-01" / "sweep" / "tiny.csv.gz"  # another recording's table
    theirs.parent.mkdir(parents=True)
    assert main([*MEASURE, "--out", str(theirs)]) == 0  # a real tiny CPU run, no --reference
    before = theirs.read_bytes()
    folder = _recording(tmp_path / "sent")  # SYNTHETIC recording of one tiny CPU sweep
    m = read_manifest(folder)
    m["experiments"][0]["args"].append("--reference")
    write_manifest(folder, m)
    os.symlink(os.path.join("..", "h200-2026-12-01", "sweep"), folder / "sweep")  # planted, relative
    try:
        main(["record", "--resume", str(folder)])
    except SystemExit:
        pass
    assert theirs.read_bytes() == before  # the other recording's table is not written over
