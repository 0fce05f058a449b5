"""hostile8: since 766c58c ``run.lost_tables`` never counts a link as a lost table, so a run noted
done whose ``<kind>/<run>.csv.gz`` is a dangling link (its disk unmounted, or planted) is no longer
measured again through that link. But nothing says so: ``record --resume`` prints "recorded 1 of 1
experiments" and exits 0, and its ``--dry-run`` plans "0 experiments", while the recording holds
no readable table of that run. Silent wrong (lesser: the link is left as it was)."""

from __future__ import annotations

import os

import pytest

from h2dlab.cli.main import main
from h2dlab.recording.folder import read_manifest, write_manifest
from tests.recording.test_record import _recording


@pytest.mark.parametrize("dry_run", [True, False])
def test_resume_names_a_done_run_whose_table_is_a_dangling_link(tmp_path, capsys, dry_run):
    folder = _recording(tmp_path / "rec")  # SYNTHETIC recording of one tiny CPU sweep
    m = read_manifest(folder)
    m["experiments"][0]["status"] = "done"
    write_manifest(folder, m)
    (folder / "sweep").mkdir()
    target = tmp_path / "unmounted" / "tiny.csv.gz"
    os.symlink(target, folder / "sweep" / "tiny.csv.gz")
    try:
        main(["record", "--resume", str(folder), *(["--dry-run"] if dry_run else [])])
    except SystemExit:
        pass
    said = capsys.readouterr()
    assert not target.exists() and (folder / "sweep" / "tiny.csv.gz").is_symlink()  # holds
    assert "sweep/tiny" in said.out + said.err, said  # the user learns its table is not there
