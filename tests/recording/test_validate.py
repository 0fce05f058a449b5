"""Table validation (issue 15): what cannot be a measurement is refused, with the row and
column named; version 1 tables read with the version 2 defaults. All tables here are
synthetic (made up to exercise the checks), not measurements."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h2dlab.cli import main as cli
from h2dlab.recording import datasets, schema
from tests.conftest import refused_in_one_line

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def synthetic(n: int = 4, **cols) -> pd.DataFrame:
    """A synthetic version 1 table: n distinct copies of one strategy and size."""
    df = pd.DataFrame(
        {
            "run_id": "synthetic",
            "order": range(n),
            "strategy": "pageable",
            "size_bytes": 4096,
            "shape": "(4096,)",
            "dtype": "uint8",
            "rep": range(n),
            "warmup": False,
            "t_s": np.arange(n) * 0.5,
            "wall_ms": 1.0 + np.arange(n),
            "event_ms": np.nan,
            "host_allocs": 0.0,
            "device_allocs": np.nan,
            "empty_cache": False,
            "error": "",
        }
    )
    for k, v in cols.items():
        df[k] = v
    return df


def with_value(df: pd.DataFrame, row: int, col: str, value) -> pd.DataFrame:
    out = df.copy()
    out[col] = out[col].astype(object)
    out.loc[row, col] = value
    return out


# --- version 2 columns and their defaults -----------------------------------------------


def test_v2_and_v3_columns_and_defaults():
    assert list(schema.COLUMNS)[: len(schema.REQUIRED)] == list(schema.REQUIRED)
    assert list(schema.ADDED_V2) == [
        "direction",
        "n_tensors",
        "minflt",
        "majflt",
        "cpu_ms",
        "gc_count",
        "sm_clock_mhz",
        "gpu_procs",
    ]
    assert list(schema.ADDED_V3) == [
        "run_delay_ms",
        "nivcsw",
        "nvcsw",
        "cpu_moved",
        "proc_cpu_ms",
        "proc_faults",
        "issue_ms",
        "gc_ms",
    ]
    assert list(schema.ADDED_V4) == [
        "others_cpu_ms",
        "others_window_ms",
        "busiest_cpu_ms",
        "busiest_thread",
        "n_threads",
    ]
    assert list(schema.ADDED_V5) == ["others_wait_ms", "longest_wait_ms"]
    assert list(schema.COLUMNS) == [
        *schema.REQUIRED,
        *schema.ADDED_V2,
        *schema.ADDED_V3,
        *schema.ADDED_V4,
        *schema.ADDED_V5,
    ]
    assert datasets.COLUMNS is schema.COLUMNS and datasets.ADDED_V4 is schema.ADDED_V4
    out = datasets.validate(synthetic())
    assert list(out.columns) == list(datasets.COLUMNS)
    assert (out["direction"] == "h2d").all() and (out["n_tensors"] == 1).all()
    assert out["n_tensors"].dtype == np.int64
    floats = ("minflt", "majflt", "cpu_ms", "gc_count", "sm_clock_mhz", "gpu_procs", *schema.ADDED_V3)
    for c in (*floats, "others_cpu_ms", "others_window_ms", "busiest_cpu_ms", "n_threads", *schema.ADDED_V5):
        assert out[c].dtype == np.float64 and out[c].isna().all(), c
    assert (out["busiest_thread"] == "").all()


def test_a_v2_table_reads_with_nan_scheduler_columns():
    """A schema-2 table (v2 columns, no v3 ones) loads; the v3 columns are NaN."""
    v2 = synthetic(direction="h2d", n_tensors=1, cpu_ms=[0.5, 0.25, 1.0, 2.0], gpu_procs=0.0)
    out = datasets.validate(v2)
    assert out["cpu_ms"].tolist() == [0.5, 0.25, 1.0, 2.0]
    assert all(out[c].isna().all() for c in schema.ADDED_V3)


def test_a_v3_table_reads_with_nan_other_thread_columns():
    """A schema-3 table (no v4 columns) loads: the v4 numbers are NaN, the name empty."""
    v3 = synthetic(direction="h2d", n_tensors=1, proc_cpu_ms=[0.5, 0.25, 1.0, 2.0], run_delay_ms=0.0)
    out = datasets.validate(v3)
    assert out["proc_cpu_ms"].tolist() == [0.5, 0.25, 1.0, 2.0]
    assert all(
        out[c].isna().all() for c in ("others_cpu_ms", "others_window_ms", "busiest_cpu_ms", "n_threads")
    )
    assert (out["busiest_thread"] == "").all()


def test_schema_version_is_6():
    import h2dlab

    assert h2dlab.SCHEMA_VERSION == 6


def test_partial_csv_with_empty_v2_cells_reads_defaults(tmp_path):
    """RowWriter writes every COLUMNS column and row.get(c): unknown values are empty."""
    p = tmp_path / "run.csv.gz.partial.csv"
    rows = synthetic(3).to_dict("records")
    rows[1]["direction"], rows[1]["n_tensors"], rows[1]["minflt"] = "d2h", 8, 12.0
    text = ",".join(datasets.COLUMNS) + "\n"
    for r in rows:
        text += pd.DataFrame([{c: r.get(c) for c in datasets.COLUMNS}]).to_csv(index=False, header=False)
    p.write_text(text)
    back = datasets.read(p)
    assert back["direction"].tolist() == ["h2d", "d2h", "h2d"]
    assert back["n_tensors"].tolist() == [1, 8, 1]
    assert back["minflt"].iloc[1] == 12.0 and math.isnan(back["minflt"].iloc[0])


@pytest.mark.parametrize("ext", [".csv", ".csv.gz", ".parquet", ".xlsx"])
def test_v2_values_roundtrip(tmp_path, ext):
    df = synthetic(direction=["h2d", "d2h"] * 2, n_tensors=[1, 1, 256, 256], cpu_ms=[0.5, 0.25, 1.0, 2.0])
    back = datasets.read(datasets.save(df, tmp_path / f"t{ext}"))
    assert list(back.columns) == list(datasets.COLUMNS)
    assert back["direction"].tolist() == ["h2d", "d2h", "h2d", "d2h"]
    assert back["n_tensors"].tolist() == [1, 1, 256, 256]
    assert back["cpu_ms"].tolist() == [0.5, 0.25, 1.0, 2.0]


# --- what validation refuses, row and column named ---------------------------------------


@pytest.mark.parametrize(
    "col, value, says",
    [
        ("wall_ms", -1.0, "is negative"),
        ("wall_ms", np.inf, "is infinite"),
        ("wall_ms", -np.inf, "is infinite"),
        ("wall_ms", "fast", "is not a number"),
        ("event_ms", -0.5, "is negative"),
        ("event_ms", np.inf, "is infinite"),
        ("t_s", np.inf, "is infinite"),
        ("host_allocs", -1.0, "is negative"),
        ("warmup", "maybe", "is not a boolean"),
        ("warmup", 1.7, "is not a boolean"),
        ("warmup", np.nan, "is not a boolean"),
        ("empty_cache", "maybe", "is not a boolean"),
        ("empty_cache", 2, "is not a boolean"),
        ("size_bytes", 0, "is not positive"),
        ("size_bytes", -4096, "is negative"),
        ("size_bytes", 1.5, "is not a whole number"),
        ("size_bytes", np.nan, "is empty"),
        ("rep", -1, "is negative"),
        ("order", np.inf, "is infinite"),
        ("run_id", "a\x00b", "control character"),
        ("run_id", "\x00" * 5000, "control character"),
        ("strategy", "page\nable", "control character"),
        ("direction", "up", "is not a direction"),
        ("n_tensors", 0, "is below 1"),
        ("minflt", -3.0, "is negative"),
        ("sm_clock_mhz", np.inf, "is infinite"),
    ],
)
def test_refused_with_row_and_column(col, value, says):
    df = synthetic(4, direction="h2d", n_tensors=1, minflt=0.0, sm_clock_mhz=1980.0)
    with pytest.raises(datasets.SchemaError, match=f"row 2, column {col}: .*{says}") as err:
        datasets.validate(with_value(df, 2, col, value), source="bad.csv")
    assert str(err.value).startswith("bad.csv: ") and len(str(err.value)) < 400


def test_nan_event_ms_is_allowed_and_nan_wall_ms_only_with_an_error():
    df = synthetic()
    assert datasets.validate(df)["event_ms"].isna().all()
    with pytest.raises(datasets.SchemaError, match="row 1, column wall_ms: .*without an error"):
        datasets.validate(with_value(df, 1, "wall_ms", np.nan))
    ok = with_value(with_value(df, 1, "wall_ms", np.nan), 1, "error", "OOM")
    assert datasets.validate(ok)["error"].tolist() == ["", "OOM", "", ""]


@pytest.mark.parametrize(
    "spelled, value",
    [(True, True), ("True", True), ("false", False), (" TRUE ", True), ("1", True), ("0.0", False)]
    + [(1, True), (0, False), (1.0, True), (np.bool_(False), False)],
)
def test_real_booleans_are_read(spelled, value):
    out = datasets.validate(with_value(synthetic(), 0, "warmup", spelled))
    assert out["warmup"].dtype == bool and out["warmup"].iloc[0] is np.bool_(value)


def test_fully_duplicated_row_is_refused():
    df = synthetic(3)
    df = pd.concat([df, df.iloc[[1]]], ignore_index=True)
    with pytest.raises(datasets.SchemaError, match="row 3 repeats row 1 in every column"):
        datasets.validate(df)


def test_two_rows_for_the_same_copy_are_refused():
    df = synthetic(3)
    df.loc[2, "rep"] = 0  # same run, direction, strategy, size, rep and warmup as row 0
    with pytest.raises(datasets.SchemaError, match=r"row 2 is the same copy as row 0 \(run_id='synthetic'"):
        datasets.validate(df)


def test_same_copy_on_two_gpus_or_directions_is_not_a_duplicate():
    df = pd.concat([synthetic(3, gpu=0, world=2), synthetic(3, gpu=1, world=2)], ignore_index=True)
    assert len(datasets.validate(df)) == 6
    df = pd.concat([synthetic(3, direction="h2d"), synthetic(3, direction="d2h")], ignore_index=True)
    assert len(datasets.validate(df)) == 6
    df = pd.concat([synthetic(3), synthetic(3, warmup=True)], ignore_index=True)
    assert len(datasets.validate(df)) == 6


def test_missing_columns_are_listed_not_a_keyerror():
    df = synthetic().drop(columns=["error", "wall_ms"])
    with pytest.raises(datasets.SchemaError, match="missing column\\(s\\) wall_ms, error"):
        datasets.validate(df, source="mine.csv")


def test_missing_columns_in_a_file(tmp_path):
    p = tmp_path / "t.csv"
    synthetic().drop(columns=["error"]).to_csv(p, index=False)
    with pytest.raises(
        datasets.SchemaError, match="t.csv is not an h2dlab measurement table: missing column"
    ):
        datasets.read(p)


def test_not_a_dataframe():
    with pytest.raises(datasets.SchemaError, match="expected a pandas DataFrame, got list"):
        datasets.validate([1, 2])


def test_empty_table_is_valid():
    out = datasets.validate(datasets.empty_table())
    assert len(out) == 0 and list(out.columns) == list(datasets.COLUMNS)


# --- properties (hypothesis) ---------------------------------------------------------------

finite_ms = st.floats(min_value=0, max_value=1e7, allow_nan=False)
true_words = st.sampled_from([True, "True", "true", " TRUE", "1", "1.0", 1, 1.0, np.bool_(True)])
false_words = st.sampled_from([False, "False", "false", "FALSE ", "0", "0.0", 0, 0.0, np.bool_(False)])


@st.composite
def tables(draw):
    """A valid synthetic table, values spelled as a CSV, a spreadsheet or pandas may give them."""
    n = draw(st.integers(1, 25))
    flags = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    warm = [draw(true_words) if f else draw(false_words) for f in flags]
    df = synthetic(n)
    df["rep"] = draw(st.permutations(range(n)))
    df["size_bytes"] = draw(st.integers(1, 2**40))
    df["wall_ms"] = draw(st.lists(finite_ms, min_size=n, max_size=n))
    df["event_ms"] = draw(st.lists(finite_ms | st.just(np.nan), min_size=n, max_size=n))
    df["warmup"] = pd.Series(warm, dtype=object)
    if draw(st.booleans()):  # a version 2 table
        df["direction"] = draw(st.sampled_from(["h2d", "d2h", "", np.nan]))
        df["n_tensors"] = draw(st.integers(1, 4096) | st.just(np.nan))
        df["cpu_ms"] = draw(st.lists(finite_ms | st.just(np.nan), min_size=n, max_size=n))
    return df, flags


@FAST
@given(tables())
def test_valid_tables_are_accepted_with_their_values(case):
    df, flags = case
    out = datasets.validate(df)
    assert out["warmup"].tolist() == flags
    assert out["wall_ms"].tolist() == [float(v) for v in df["wall_ms"]]
    assert set(out["direction"]) <= {"h2d", "d2h"} and (out["n_tensors"] >= 1).all()
    assert list(out.columns) == list(datasets.COLUMNS)


BAD = st.sampled_from(
    [
        ("wall_ms", -1e-3),
        ("wall_ms", np.inf),
        ("event_ms", -np.inf),
        ("t_s", -2.0),
        ("warmup", "maybe"),
        ("warmup", 0.5),
        ("warmup", "yes please"),
        ("empty_cache", 1.7),
        ("size_bytes", 0),
        ("size_bytes", -1),
        ("rep", 0.25),
        ("run_id", "run\x00"),
        ("run_id", "\x1b[31m"),
        ("shape", "(1,\t2)"),
    ]
)


@FAST
@given(tables(), BAD, st.data())
def test_one_bad_value_is_refused_at_its_row_and_column(case, bad, data):
    df, _ = case
    row = data.draw(st.integers(0, len(df) - 1))
    col, value = bad
    with pytest.raises(datasets.SchemaError, match=f"row {row}, column {col}: "):
        datasets.validate(with_value(df, row, col, value))


@FAST
@given(tables(), st.data())
def test_a_repeated_row_is_refused(case, data):
    df, _ = case
    i = data.draw(st.integers(0, len(df) - 1))
    twice = pd.concat([df, df.iloc[[i]]], ignore_index=True)
    with pytest.raises(datasets.SchemaError, match=f"row {len(df)} repeats row {i} in every column"):
        datasets.validate(twice)


@FAST
@given(st.one_of(st.text(max_size=6), st.floats(), st.integers(-3, 3), st.booleans(), st.none()))
def test_booleans_accepted_exactly_when_they_are_one(value):
    spelled = str(value).strip().lower() if isinstance(value, str) else None
    truth = {"true": True, "1": True, "1.0": True, "false": False, "0": False, "0.0": False}
    if isinstance(value, str):
        want = truth.get(spelled)
    elif isinstance(value, bool) or (value is not None and not isinstance(value, str) and value in (0, 1)):
        want = bool(value)
    else:
        want = None
    df = with_value(synthetic(2), 0, "empty_cache", value)
    if want is None:
        with pytest.raises(datasets.SchemaError, match="row 0, column empty_cache: .*is not a boolean"):
            datasets.validate(df)
    else:
        assert datasets.validate(df)["empty_cache"].iloc[0] is np.bool_(want)


@FAST
@given(tables())
def test_save_read_roundtrip_keeps_every_value(case):
    import tempfile
    from pathlib import Path

    df, _ = case
    want = datasets.validate(df)
    with tempfile.TemporaryDirectory() as d:
        back = datasets.read(datasets.save(df, Path(d) / "t.csv.gz"))
    pd.testing.assert_frame_equal(back.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False)


DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.mark.parametrize("name", ["py\tthon", "\x1b[2Jevil", "a\nb"])
def test_a_busiest_thread_with_control_characters_is_refused(tmp_path, capsys, name):
    """explain printed it raw in the evidence: a terminal escape from a table."""
    path = tmp_path / "ctrl.csv.gz"
    df = datasets.read(DATA / "h200/d2h/d2h.csv.gz")
    df.loc[df.index[3], "busiest_thread"] = name
    df.to_csv(path, index=False)  # not save(): it validates, as read does
    refused_in_one_line(
        ["explain", str(path)], ["row 3", "busiest_thread", "control character"], capsys, tmp_path
    )


def test_real_thread_names_pass():
    df = datasets.read(DATA / "h200/d2h/d2h.csv.gz")
    df["busiest_thread"] = ["python3", "pt_autograd_0", "cuda-EvtHandlr", ""] * (len(df) // 4) + [""] * (
        len(df) % 4
    )
    assert datasets.validate(df)["busiest_thread"].tolist() == df["busiest_thread"].tolist()


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "is blank"),
        ("   ", "is blank"),
        ("pageable\u202e", "control character or an invisible format"),  # right-to-left override
        ("page\u0085able", "control character or an invisible format"),  # a C1 control (NEL)
    ],
    ids=["empty", "spaces", "rlo", "c1"],
)
def test_a_blank_or_invisible_strategy_name_is_refused(tmp_path, capsys, name, says):
    """explain printed '[run #208]  256 KiB' with no strategy; a U+202E name reversed the line."""
    from h2dlab.recording import datasets

    df = datasets.read(datasets.DATA_DIR / "h200/d2h/d2h.csv.gz")
    df["strategy"] = df["strategy"].astype(object)
    df.loc[df.index[3], "strategy"] = name
    path = tmp_path / "s.csv"
    df.to_csv(path, index=False, encoding="utf-8")  # not save(): it validates, as read does
    for cmd in (["explain", str(path)], ["compare", str(path)]):
        assert cli.main(cmd) == 2, cmd
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "row 3, column strategy" in err[0] and says in err[0], err


@pytest.mark.parametrize("kind", ["timedelta", "datetime"])
def test_a_time_column_stored_as_a_time_span_or_date_is_refused(tmp_path, capsys, kind):
    """A parquet wall_ms stored as a timedelta read as nanoseconds: '24.0 s' for a 24 µs copy."""
    from h2dlab.recording import datasets

    df = datasets.read(datasets.DATA_DIR / "h200/d2h/d2h.csv.gz")
    if kind == "timedelta":
        df["wall_ms"] = pd.to_timedelta(df["wall_ms"], unit="ms")
    else:
        df["wall_ms"] = pd.to_datetime(df["wall_ms"], unit="ms")
    path = tmp_path / "t.parquet"
    df.to_parquet(path)
    said = {"timedelta": "is a time span", "datetime": "is a date"}[kind]
    assert cli.main(["explain", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "column wall_ms" in err[0] and f"{said}, not a number" in err[0], err


@pytest.mark.parametrize(
    ("name", "ok"), [("👩\u200d💻", True), ("🏳️\u200d🌈", True), ("page\u2028able", False)]
)
def test_emoji_joined_by_zwj_pass_and_line_separators_do_not(name, ok):
    from h2dlab.recording.schema import _unprintable

    assert _unprintable(name) is (not ok)
