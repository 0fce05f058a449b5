"""hostile8: to keep a run's orphaned env.json, ``run._run_kept_elsewhere`` (766c58c) reads "the
header and first row" of every sibling ``.csv.gz`` with ``csv.reader`` on ``gzip.open``, with no
bound on what that first row unpacks to. A sibling of only commas (one endless row of empty
fields; the csv field-size limit never trips) is a list of one pointer per comma: 16 KB on disk
took 157 MiB, 48 KB took 457 MiB in ``record --resume`` of a folder someone sent, so about 1 MB
takes 10 GiB (MemoryError or the OOM killer). The kit's own table reader refuses such a bomb
(``tableio``'s unpacked-bytes limit). Security (memory exhaustion from a received folder)."""

from __future__ import annotations

import gzip
import json
import tracemalloc

from h2dlab.recording import datasets
from h2dlab.recording.run import _orphan_env_of_its_own

RUN = {"kind": "sweep", "run": "tiny", "args": ["measure"]}


def test_a_sibling_table_of_endless_commas_is_not_unpacked_into_memory(tmp_path):
    kind = tmp_path / "sweep"
    kind.mkdir()
    out = kind / "tiny.csv.gz"  # gone; its own env.json left
    env = {"run_id": "RID-synthetic", "command": f"h2dlab measure --out {out}"}  # SYNTHETIC
    datasets.env_path(out).write_text(json.dumps(env))
    with gzip.open(kind / "planted.csv.gz", "wb", compresslevel=9) as fh:  # about 16 KB on disk
        for _ in range(16):
            fh.write(b"," * (1 << 20))
    tracemalloc.start()
    try:
        forced = _orphan_env_of_its_own(out, RUN)
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert forced  # the planted file holds no run: the run starts again, as before
    assert peak_bytes < 8 << 20, f"{peak_bytes / 2**20:.0f} MiB for a 16 KB sibling"
