"""hostile9: b9bc080 makes ``record --resume`` refuse a recording whose kind folder is a link
(exit 2, nothing run), but ``record --resume --dry-run`` of the same folder plans the run through
the link and exits 0, saying nothing of it. The plan a user checks before a long run promises a
run the real resume refuses. Silent wrong (lesser): the dry run disagrees with the run it previews."""

from __future__ import annotations

import os

from h2dlab.cli.main import main
from tests.recording.test_record import _recording


def _rc(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def test_resume_dry_run_refuses_a_kind_folder_link_as_the_resume_does(tmp_path, capsys):
    (tmp_path / "other" / "sweep").mkdir(parents=True)  # another recording's kind folder
    folder = _recording(tmp_path / "sent")  # SYNTHETIC recording of one tiny CPU sweep
    os.symlink(os.path.join("..", "other", "sweep"), folder / "sweep")  # planted, relative
    assert _rc(["record", "--resume", str(folder)]) == 2  # the real resume refuses
    capsys.readouterr()
    rc = _rc(["record", "--dry-run", "--resume", str(folder)])
    err = capsys.readouterr().err
    assert (rc, "sweep" in err and "link" in err) == (2, True)  # the plan says what the run would
