"""hostile7: ``record --resume`` of a run noted done whose table is a dangling symbolic link
(its disk unmounted, its target moved, or a link planted in a recording someone sent).
``lost_tables`` counts it as gone ("measured again"); ``_child_command`` then resolves the
run's ``--out`` through the link, so the child measures and writes its table, partial file and
env.json at the link's target, outside the recording (the ``out.is_symlink()`` guard of
``_orphan_env_of_its_own`` sees the resolved path, never the link). The child's ``--out`` is
also the path handed over as the recorder's own (``RECORDING_OUT_VAR``), so ``not_into_data``
lets it into another recording's kind folder, where it is read as one more run of that
recording. The run is then FAILED here (the env.json beside the link is the old run's), and
every retry fails the same way. The kit's rule: it never writes a run through a link."""

from __future__ import annotations

from h2dlab.recording import datasets
from tests.recording.test_record import _plan, _record, _recording

TINY = {"kind": "sweep", "run": "tiny", "args": ["measure", "--sizes", "1KiB", "--reps", "2", "--warmup", "0", "--strategies", "pageable"], "seconds": 2}  # fmt: skip


def test_resume_does_not_write_a_run_through_a_dangling_table_link(tmp_path):
    folder = tmp_path / "rec"
    p = _record("--device", "cpu", "--plan", _plan(tmp_path, TINY), "--out", str(folder))
    _, err = p.communicate(timeout=240)
    assert p.returncode == 0, err
    other = _recording(tmp_path / "other")  # SYNTHETIC: another recording, its sweep folder empty
    (other / "sweep").mkdir()
    target = other / "sweep" / "planted.csv.gz"
    table = folder / "sweep" / "tiny.csv.gz"
    table.unlink()
    table.symlink_to(target)  # dangling: its target does not exist

    p = _record("--resume", str(folder))
    _, err = p.communicate(timeout=240)
    assert table.is_symlink()  # holds: the link itself is kept
    written = sorted(x.name for x in (other / "sweep").iterdir())
    assert written == [], (written, err)  # nothing joins the other recording as one more run
    assert not datasets.env_path(target).exists()
