"""``--resume`` keeps the measured rows of a stopped table beside an empty partial file
(hostile pass 4, issue 35: data loss).

A single Ctrl-C while a ``--resume`` of a stopped table starts (``RowWriter`` has
created ``<out>.partial.csv`` and is still turning the table's rows into text: seconds for
a large table) exits 130 and leaves that partial file with 0 bytes beside the table. The
next ``--resume`` reads the empty partial file as "no rows", measures every planned row
again under a new run id and writes the table over the rows measured before, exit 0 and
no word. Found with real signals on ``measure --reps 50000``: 114,913 and 120,000 measured
rows replaced. Tables
here are synthetic for the purpose: host copies measured on the CPU.
"""

import pandas as pd

from h2dlab.cli import main as cli
from h2dlab.measure.recorder import partial_path

ARGS = ["measure", "--device", "cpu", "--strategies", "pageable", "--sizes", "1KiB,4KiB"]
ARGS += ["--reps", "3", "--warmup", "0", "--no-progress"]


def test_resume_keeps_the_stopped_tables_rows_beside_an_empty_partial_file(tmp_path, capsys):
    out = tmp_path / "r.csv"
    assert cli.main([*ARGS, "--out", str(out)]) == 0
    stopped = pd.read_csv(out).iloc[:3]  # a table stopped after 3 of its 6 rows
    stopped.to_csv(out, index=False)
    partial_path(out).write_bytes(b"")  # what a resume cut short at its start leaves
    rc = cli.main([*ARGS, "--out", str(out), "--resume"])
    capsys.readouterr()
    after = pd.read_csv(out)
    assert rc in (0, 2)
    if rc == 0:
        assert len(after) == 6
        assert after["run_id"].eq(stopped["run_id"].iloc[0]).all()
        assert after["t_s"].iloc[:3].tolist() == stopped["t_s"].tolist()
    else:  # refused: the stopped table is left as it was
        assert after["t_s"].tolist() == stopped["t_s"].tolist()
