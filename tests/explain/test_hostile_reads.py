"""Hostile RUN arguments to explain and compare (helper "guard"), each of which ended in a
traceback, the wrong exit code, a hang or a silent reading before:

- a device or a pipe given as the table (``/dev/null``, a FIFO named ``x.csv``): exit 1,
  "h2dlab: error: Not a directory: /dev/null";
- a FIFO named like a table inside a folder of tables: explain of the folder waited forever
  (and a folder named ``x.csv`` there failed the whole read);
- ``compare`` of a table whose timed copies are so large that their median overflows:
  OverflowError traceback in fmt_ms;
- ``RECORDING:KIND:`` with nothing after the last colon read every run, where
  ``DATASET:`` is refused.

Tables here are SYNTHETIC (copies of data/h200's d2h table with a value replaced).
"""

import os
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from h2dlab.cli import main as cli
from h2dlab.cli.compare import fmt_ms
from h2dlab.recording import datasets
from h2dlab.recording.folder import run_tables
from tests.conftest import refused_in_one_line

D2H = datasets.DATA_DIR / "h200" / "d2h" / "d2h.csv.gz"


def _copy(folder, name="synthetic.csv.gz"):
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(D2H, folder / name)
    shutil.copy(D2H.with_name(D2H.name + ".env.json"), folder / f"{name}.env.json")
    return folder / name


@pytest.mark.parametrize("cmd", ["explain", "compare"])
def test_a_device_or_a_pipe_is_refused_in_one_line(tmp_path, capsys, monkeypatch, cmd):
    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "pipe.csv")
    for given in ("/dev/null", "pipe.csv"):
        line = refused_in_one_line([cmd, given], [given, "neither a file nor a folder"], capsys, tmp_path)
        assert (
            line
            == f"h2dlab: error: {given}: neither a file nor a folder (a device or a pipe): give a table's path"
        )


def test_a_pipe_or_folder_named_like_a_table_is_no_table(tmp_path, capsys):
    table = _copy(tmp_path / "runs")
    os.mkfifo(tmp_path / "runs" / "pipe.csv")  # reading it would wait for a writer forever
    (tmp_path / "runs" / "folder.csv").mkdir()
    assert run_tables(tmp_path / "runs") == [table]  # checked first: a regression fails, not hangs
    assert len(datasets.load(tmp_path / "runs")) == len(datasets.load(D2H))
    assert cli.main(["explain", str(tmp_path / "runs")]) == 0
    assert "606 rows, run(s) synthetic" in capsys.readouterr().out


def test_compare_shows_an_overflowing_median_as_n_a(tmp_path, capsys):
    path = tmp_path / "synthetic-huge.csv"
    df = pd.read_csv(D2H).assign(event_ms=1e308)  # finite, so the reader takes it
    df.to_csv(path, index=False)
    assert cli.main(["compare", str(path)]) == 0
    out = capsys.readouterr().out
    assert "n/a (0 µs)" in out and "Traceback" not in out
    assert fmt_ms(0.0, float("inf")) == "0 µs" and fmt_ms(0.5, float("nan")) == "500 µs"
    assert fmt_ms(0.5, 2.0) == "0.50"  # a finite median still sets the unit and the decimals


@pytest.mark.parametrize("given", ["h200:sweep:", "h200:d2h:"])
def test_a_recording_kind_with_an_empty_run_is_refused(tmp_path, capsys, monkeypatch, given):
    monkeypatch.chdir(tmp_path)
    kind = given.split(":")[1]
    line = refused_in_one_line(["compare", given], [], capsys, tmp_path)
    assert line == (
        f"h2dlab: error: {given!r} names no run after its last ':': give h200:{kind} for every "
        f"{kind} run, or h200:{kind}:RUN"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["explain", "{long}"],
        ["compare", "forum_a100", "{long}"],
        ["explain", "forum_a100", "--out", "{long}"],
        ["measure", "--device", "cpu", "--sizes", "1KiB", "--out", "{long}"],
    ],
)
def test_a_name_too_long_is_a_usage_mistake(tmp_path, capsys, monkeypatch, argv):
    """It was exit 1 ('this machine or the run failed'), the name given being the mistake."""
    monkeypatch.chdir(tmp_path)
    long = str(tmp_path / ("a" * 300 + ".csv"))
    argv = [a.replace("{long}", long) for a in argv]
    line = refused_in_one_line(argv, ["File name too long", "give a shorter name"], capsys, tmp_path)
    assert line.startswith(f"h2dlab: error: File name too long: {long}")  # measure: its .partial.csv
    assert line.endswith(": give a shorter name")


def test_explain_of_a_table_read_with_plain_pandas_flags_what_the_kit_reader_does(tmp_path):
    """pd.read_csv reads an empty ``error`` as NaN; explain used to see every row as failed
    and flag nothing, silently."""
    from h2dlab.explain import outliers

    kit = datasets.load(datasets.DATA_DIR / "h200" / "d2h")  # a table with flagged copies
    path = tmp_path / "d2h.csv"
    kit.to_csv(path, index=False)
    plain = pd.read_csv(path)
    assert plain["error"].isna().all()  # the trap itself
    bare = kit.copy()
    bare.attrs = {}  # a CSV carries no env.json: no stall census, so no host_stall, for either
    want = outliers.explain(bare)
    got = outliers.explain(plain)
    assert want["is_outlier"].sum() > 0  # 4 flagged at b95e09d, 9 at 66f20f2
    assert got["is_outlier"].tolist() == want["is_outlier"].tolist()
    assert got["cause"].tolist() == want["cause"].tolist()


def test_explain_of_concatenated_tables_with_a_repeated_index_says_how_to_join_them():
    from h2dlab.explain import outliers

    t = datasets.load(datasets.DATA_DIR / "h200" / "bidir")
    with pytest.raises(ValueError, match=r"index repeats.*ignore_index=True"):
        outliers.explain(pd.concat([t, t.assign(run_id="other")]))
    both = outliers.explain(pd.concat([t, t.assign(run_id="other")], ignore_index=True))
    assert both["is_outlier"].sum() == 2 * outliers.explain(t)["is_outlier"].sum()


@pytest.fixture(scope="module")
def bidir_flags():
    from h2dlab.explain import outliers

    t = datasets.load(datasets.DATA_DIR / "h200" / "bidir")
    return t, outliers.detect(t)["is_outlier"].tolist()


@pytest.fixture(scope="module")
def d2h_flags():
    """A bundled table with flagged copies (data/h200/d2h: 4 at b95e09d, 9 at 66f20f2)."""
    from h2dlab.explain import outliers

    t = datasets.load(datasets.DATA_DIR / "h200" / "d2h")
    return t, outliers.detect(t)["is_outlier"].tolist()


@pytest.mark.parametrize(
    "spoil, said",
    [
        (lambda t: t.assign(error=0), "column 'error' holds numbers"),
        (lambda t: t.assign(warmup=t.warmup.map({True: "yes", False: "no"})), "column 'warmup' holds 'yes'"),
        (lambda t: t.assign(size_bytes=t.size_bytes > 0), "column 'size_bytes' holds booleans"),
        (lambda t: t.assign(run_id=np.nan), "column 'run_id' is empty in 288 row"),
        (lambda t: pd.concat([t, t], ignore_index=True), "repeats an earlier row in every column"),
        (lambda t: t.set_index([t.run_id, t.order]), "is not unique flat labels"),
        (lambda t: t.set_axis([(i, "x") for i in range(len(t))]), "is not unique flat labels"),
        (lambda t: t.set_axis([np.nan, np.nan, *range(len(t) - 2)]), "is not unique flat labels"),
        (lambda t: pd.concat([t, t.event_ms], axis=1), "names column(s) event_ms twice"),
    ],
)
def test_detect_refuses_a_spoilt_table_saying_what_to_fix(bidir_flags, spoil, said):
    """Each of these (helper "attack", eighth session) gave 0 flags, invented an episode, or
    failed with an unrelated KeyError/IndexError/TypeError."""
    from h2dlab.explain import outliers

    t, _ = bidir_flags
    for fn in (outliers.detect, outliers.explain):
        with pytest.raises(ValueError, match=re.escape(said)):
            fn(spoil(t))


@pytest.mark.parametrize(
    "mend",
    [
        lambda t: t.assign(warmup=t.warmup.map({True: "True", False: "False"})),
        lambda t: t.assign(warmup=t.warmup.astype(int)),
        lambda t: t.assign(size_bytes=t.size_bytes.astype(str), wall_ms=t.wall_ms.astype(str)),
        lambda t: t.assign(error=np.where(t.index < 3, np.nan, t.error)),
        lambda t: t.set_axis([f"r{i}" for i in range(len(t))]),
    ],
)
def test_detect_reads_text_booleans_numbers_as_text_and_nan_errors_as_the_table(d2h_flags, mend):
    from h2dlab.explain import outliers

    t, want = d2h_flags
    assert outliers.detect(mend(t))["is_outlier"].tolist() == want
    assert outliers.explain(mend(t))["is_outlier"].sum() == sum(want) > 0


def test_normalised_messages_name_the_first_bad_value_and_say_what_to_do(bidir_flags):
    """Whole messages (mutation testing, eighth session: substrings let reworded ones pass)."""
    from h2dlab.explain.rows import normalised

    t, _ = bidir_flags

    def said(table):
        with pytest.raises(ValueError) as e:
            normalised(table)
        return str(e.value)

    assert said(t.set_axis(pd.Index([f"r{i % 5}" for i in range(len(t))], dtype=object))) == (
        "the table's index repeats (pd.concat of tables keeps each one's index): join them with "
        "pd.concat([...], ignore_index=True), or call df.reset_index(drop=True)"
    )
    assert said(t.set_index([t.run_id, t.order])).startswith("the table's index is not unique flat labels (")
    assert said(pd.concat([t, t.event_ms, t.wall_ms], axis=1)) == (
        "the table names column(s) event_ms, wall_ms twice: keep one of each"
    )
    errors = np.zeros(len(t))
    errors[0] = 5
    assert said(t.assign(error=errors)) == (
        "column 'error' holds numbers (np.float64(5.0)): it holds each failed copy's error text, empty for none"
    )
    warm = t.warmup.map({True: "True", False: "False"}).astype(object)
    warm.iloc[3], warm.iloc[7] = "maybe", "perhaps"
    assert said(t.assign(warmup=warm)) == "column 'warmup' holds 'maybe', not a boolean: write True or False"
    assert said(t.assign(size_bytes=True)) == (
        "column 'size_bytes' holds booleans: it holds each copy's size in bytes"
    )
    assert said(pd.concat([t, t.iloc[[5]]], ignore_index=True)) == (
        f"row {len(t)} repeats an earlier row in every column: a table holds each copy once "
        "(df.drop_duplicates())"
    )


def test_normalised_returns_a_clean_table_itself_and_mends_only_what_needs_it(bidir_flags):
    from h2dlab.explain import outliers
    from h2dlab.explain.rows import normalised

    t, _ = bidir_flags
    assert normalised(t) is t  # nothing to mend: no copy, no dtype changed
    assert normalised(t.set_axis(pd.Index([f"r{i}" for i in range(len(t))], dtype=object))).index[0] == "r0"
    mended = normalised(t.assign(warmup=t.warmup.astype(int), size_bytes=t.size_bytes.astype(str)))
    assert mended["warmup"].dtype == bool and mended["size_bytes"].dtype == float
    assert mended["size_bytes"].tolist() == t.size_bytes.astype(float).tolist()
    # an old table lacks the later evidence columns: nothing to mend there, nothing refused
    old = t.drop(columns=["minflt", "majflt", "gpu_procs", "sm_clock_mhz"])
    assert normalised(old) is old
    # text that is no number is left to check_values, which names it
    slow = t.wall_ms.astype(object)
    slow.iloc[4] = "fast"
    with pytest.raises(ValueError, match=r"column 'wall_ms' holds 1 value\(s\) that are not numbers"):
        outliers.detect(t.assign(wall_ms=slow))
    # a table without warmup is refused by the column check, not a KeyError
    with pytest.raises(ValueError, match=r"missing column\(s\) warmup"):
        outliers.detect(t.drop(columns="warmup"))


@pytest.mark.parametrize(
    "spoil, said",
    [
        (
            lambda t: t.assign(size_bytes=(t.size_bytes > 0).astype(object)),
            "column 'size_bytes' holds booleans",
        ),
        (
            lambda t: t.assign(size_bytes=(t.size_bytes > 0).astype("boolean")),
            "column 'size_bytes' holds booleans",
        ),
        (
            lambda t: t.assign(error=t.error.astype(object).mask(t.error == "", 0)),
            "column 'error' holds numbers (0)",
        ),
        (
            lambda t: t.set_axis(pd.MultiIndex.from_tuples([(c, "") for c in t.columns]), axis=1),
            "several levels",
        ),
    ],
)
def test_detect_refuses_what_the_second_attack_found(bidir_flags, spoil, said):
    """Each gave wrong flags (12 for 1, or 0) or a KeyError (helper attack, eighth session)."""
    from h2dlab.explain import outliers

    t, _ = bidir_flags
    with pytest.raises(ValueError, match=re.escape(said)):
        outliers.detect(spoil(t))


def test_detect_reads_blank_text_cells_nan_text_errors_and_list_columns_as_the_table(bidir_flags, tmp_path):
    from h2dlab.explain import outliers

    t, want = bidir_flags
    for mended in (
        t.assign(error=" "),
        t.assign(error="nan"),
        t.assign(tags=[[1, 2]] * len(t)),
        t.assign(wall_ms=t.wall_ms.astype(str).mask(t.index == 7, "")),
    ):
        # (row 7's blank wall time: its CUDA-event time is what detect reads)
        assert outliers.detect(mended)["is_outlier"].tolist() == want
    # a table with a failed copy, read back with keep_default_na=False: its blank times are text
    failed = t.copy()
    failed.loc[5, ["error", "wall_ms", "event_ms"]] = ["CUDA error: out of memory", np.nan, np.nan]
    failed.to_csv(tmp_path / "f.csv", index=False)
    back = outliers.detect(pd.read_csv(tmp_path / "f.csv", keep_default_na=False))
    assert back["is_outlier"].tolist() == outliers.detect(failed)["is_outlier"].tolist()
    assert np.isnan(back.at[5, "expected_ms"])
