"""explain()'s causes and evidence sentences on the bundled recordings that
``test_outliers_pinned`` leaves out, pinned word for word.

``tests/data/explain_evidence.csv`` holds, for every row that ``explain()`` flags or puts in an
episode in ``h200_omp`` and in each kind of the bundled recording ``data/h200`` (the tables
of schemas 4 to 6, whose per-copy rules ``host_parallel``, ``other_threads``,
``host_blocked``, ``page_faults``, ``gc_pause``, ``host_stall`` and ``gpu_wake`` fire on), its
key and what explain() said. It was written by this file's ``__main__`` at commit 7c06505,
before the evidence builders of ``causes_parallel`` and ``causes_crowded`` were made one
(issue 29): the test proves a refactoring of the rules leaves every sentence as it was.
Regenerate it only when the recordings or the cause rules change on purpose
(``python tests/explain/test_evidence_pinned.py``), and say so in the commit.
"""

from pathlib import Path

import pandas as pd
import pytest

from h2dlab.explain import outliers
from h2dlab.recording import datasets
from h2dlab.recording.places import CHECKOUT

PINNED = Path(__file__).resolve().parents[1] / "data" / "explain_evidence.csv"
RECORDING = CHECKOUT / "data" / "h200"
#: Name -> what to load: a bundled dataset, or a kind's folder of the bundled recording.
TABLES = {
    "h200_omp": "h200_omp",
    **{
        f"h200/{k}": RECORDING / k
        for k in ("forum", "sweep", "allocator", "d2h", "batch", "idle", "workload", "reference")
    },
}
KEY = ["table", "run_id", "strategy", "direction", "order", "rep", "size_bytes"]


def evidence_table(name: str) -> pd.DataFrame:
    """The rows of table ``name`` that explain() flags or puts in an episode, keyed."""
    e = outliers.explain(datasets.load(TABLES[name]))
    f = e[e["is_outlier"] | (e["episode"] >= 0)].assign(table=name)
    out = f[[*KEY, "is_outlier", "episode", "cause", "evidence"]]
    return out.sort_values(KEY).reset_index(drop=True)


@pytest.fixture(scope="module")
def pinned() -> pd.DataFrame:
    return pd.read_csv(PINNED, keep_default_na=False, dtype={"run_id": str})


@pytest.mark.parametrize("name", list(TABLES))
def test_explain_evidence_pinned(name, pinned):
    want = pinned[pinned["table"] == name].sort_values(KEY).reset_index(drop=True)
    got = evidence_table(name)
    assert len(want) > 0
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


def test_the_pin_holds_the_host_side_rules_sentences(pinned):
    """The pin is worth its file: it holds the sentences of the rules it was made for. How many
    depends on the bundled recording (47 host_parallel and 23 other_threads rows in the one of
    commit 66f20f2, 22 and 10 in the one of commit 5cb3034): at least ten of each."""
    counts = pinned["cause"].value_counts()
    assert counts.get("host_parallel", 0) >= 10 and counts.get("other_threads", 0) >= 10
    assert counts.get("gpu_wake", 0) >= 1 and counts.get("host_blocked", 0) >= 1


if __name__ == "__main__":
    pd.concat([evidence_table(n) for n in TABLES], ignore_index=True).to_csv(PINNED, index=False)
    print(f"wrote {PINNED}")
