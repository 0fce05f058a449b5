"""explain()'s flags on the bundled recordings, pinned.

``tests/data/explain_flags.csv`` holds, for every row that ``explain()`` flagged or put in
an episode on the bundled datasets, its key (dataset, run, strategy, order, rep, size) and
what explain() said (is_outlier, episode, cause, evidence). It was written by this file's
``__main__`` with ruptures' PELT change-point search and the cause rules of commit 4eedb13,
before the search was replaced by a faster one and the schema-2 causes were added: the
test proves the new code gives the same answers, word for word, on the old recordings.
Regenerated once since, deliberately, for the ``gpu_wake`` cause (helper wake): 16 copies
went from ``unexplained`` to ``gpu_wake`` and the other unexplained copies' evidence gained
the idle-gap check; nothing else changed. Regenerated again (helper wake2) when
``gpu_wake`` began to need a calibration from idle runs recorded beside the table: these
recordings have none, so those 16 copies are ``unexplained`` again and every idle-gap
check says no idle runs tell what a pause costs on this machine; nothing else changed.
Regenerated (lead, session 6) when the idle gap stopped claiming "(the GPU idle at most
that)": a gap is the time since the previous copy, and a GPU submission in it does not
undo a spell without copies; 57 evidence sentences lost those words, nothing else changed.
Regenerated (session 28) when an unexplained copy began to name the per-copy checks its
table could not make: the 100 unexplained copies of these schema-1 tables each gained "not
recorded for it, so not checked: page faults, the thread's CPU time, garbage collections,
the SM clock, other processes on the GPU" (before the idle-gap check; the 16 forum_a100
copies with no counters at all say it where they said "the table carries no counters for
it"); nothing else changed.
Regenerate it only when the recordings or the
cause rules change on purpose (``python tests/explain/test_outliers_pinned.py``), and say so in the
commit.
"""

from pathlib import Path

import pandas as pd
import pytest

from h2dlab.explain import outliers
from h2dlab.recording import datasets

FLAGS = Path(__file__).resolve().parents[1] / "data" / "explain_flags.csv"
DATASETS = ("forum_a100", "h200_forum", "h200_sweep", "h200_allocator")
KEY = ["dataset", "run", "strategy", "order", "rep", "size_bytes"]


def flag_table(name: str) -> pd.DataFrame:
    """The rows of ``name`` that explain() flags or puts in an episode, keyed."""
    d = datasets.load(name)
    e = outliers.explain(d)
    run_names = d.attrs.get("run_names") or {}
    f = e[e["is_outlier"] | (e["episode"] >= 0)]
    out = f.assign(dataset=name, run=f["run_id"].map(lambda r: run_names.get(r, r)))
    return out[[*KEY, "is_outlier", "episode", "cause", "evidence"]].sort_values(KEY).reset_index(drop=True)


@pytest.mark.parametrize("name", DATASETS)
def test_explain_flags_pinned(name):
    want = pd.read_csv(FLAGS, keep_default_na=False)
    want = want[want["dataset"] == name].sort_values(KEY).reset_index(drop=True)
    got = flag_table(name)
    assert len(want) > 0
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


if __name__ == "__main__":
    pd.concat([flag_table(n) for n in DATASETS], ignore_index=True).to_csv(FLAGS, index=False)
    print(f"wrote {FLAGS}")
