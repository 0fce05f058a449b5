import gzip

import numpy as np
import pandas as pd
import pytest

from h2dlab.cli import main as cli
from h2dlab.recording import datasets
from tests.conftest import refused_in_one_line


def _synthetic_table(n=6):
    """A synthetic table (not a measurement) to exercise save/read."""
    return pd.DataFrame(
        {
            "run_id": "synthetic",
            "order": range(n),
            "strategy": "pageable",
            "size_bytes": 1024,
            "shape": "(1024,)",
            "dtype": "uint8",
            "rep": range(n),
            "warmup": [True] + [False] * (n - 1),
            "t_s": np.arange(n) * 0.1,
            "wall_ms": 1.0 + np.arange(n),
            "event_ms": np.nan,
            "host_allocs": np.nan,
            "device_allocs": np.nan,
            "empty_cache": False,
            "error": "",
        }
    )


@pytest.mark.parametrize("ext", [".csv", ".csv.gz", ".parquet", ".xlsx"])
def test_roundtrip(tmp_path, ext):
    df = _synthetic_table()
    p = datasets.save(
        df, tmp_path / f"t{ext}", env={"run_id": "synthetic", "schema_version": 1, "gpu_name": "synthetic"}
    )
    back = datasets.read(p)
    assert back["wall_ms"].tolist() == df["wall_ms"].tolist()
    assert back["warmup"].tolist() == df["warmup"].tolist()
    assert (back["error"] == "").all()
    assert back.attrs["env"]["gpu_name"] == "synthetic"


def test_foreign_csv_names_missing_columns(tmp_path):
    p = tmp_path / "foreign.csv"
    pd.DataFrame({"a": [1], "b": [2]}).to_csv(p, index=False)
    with pytest.raises(datasets.SchemaError, match="missing column"):
        datasets.read(p)


def test_truncated_parquet(tmp_path):
    p = datasets.save(_synthetic_table(), tmp_path / "t.parquet")
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(datasets.SchemaError, match="not a readable"):
        datasets.read(p)


@pytest.mark.parametrize("version", [99, 7, 0])
def test_wrong_schema_version(tmp_path, version):
    p = datasets.save(
        _synthetic_table(), tmp_path / "t.csv", env={"run_id": "synthetic", "schema_version": version}
    )
    with pytest.raises(datasets.SchemaError, match=f"version {version!r}, this h2dlab reads versions 1 to 6"):
        datasets.read(p)


@pytest.mark.parametrize("version", ["2", None, True])
def test_a_schema_version_that_is_no_whole_number_is_damage(tmp_path, version):
    p = datasets.save(
        _synthetic_table(), tmp_path / "t.csv", env={"run_id": "synthetic", "schema_version": version}
    )
    with pytest.raises(
        datasets.SchemaError, match=f"schema_version {version!r} in its env.json is not a whole"
    ):
        datasets.read(p)


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_every_older_schema_version_is_read(tmp_path, version):
    p = datasets.save(
        _synthetic_table(), tmp_path / "t.csv", env={"run_id": "synthetic", "schema_version": version}
    )
    back = datasets.read(p)
    assert back.attrs["env"]["schema_version"] == version and (back["n_tensors"] == 1).all()


def test_env_json_is_named_after_the_whole_file_name(tmp_path):
    """r.csv.gz, r.parquet and r.xlsx each keep their own fingerprint (issue 15.4)."""
    assert datasets.env_path(tmp_path / "r.csv.gz") == tmp_path / "r.csv.gz.env.json"
    for ext in (".csv.gz", ".parquet", ".xlsx"):
        datasets.save(
            _synthetic_table().assign(run_id=f"run{ext}"),
            tmp_path / f"r{ext}",
            env={"run_id": f"run{ext}", "made": ext},
        )
    for ext in (".csv.gz", ".parquet", ".xlsx"):
        assert (tmp_path / f"r{ext}.env.json").exists()
        assert datasets.read(tmp_path / f"r{ext}").attrs["env"] == {"run_id": f"run{ext}", "made": ext}
    assert not (tmp_path / "r.env.json").exists()
    assert not list(tmp_path.glob(".tmp-*"))  # written atomically: no temporary file left


def test_old_stem_env_json_is_still_read_for_its_own_run(tmp_path):
    """Tables written before schema 2 (every bundled one) have <stem>.env.json."""
    p = tmp_path / "r.csv.gz"
    datasets.save(_synthetic_table(), p)
    datasets.write_env({"run_id": "synthetic", "schema_version": 1}, tmp_path / "r.env.json")
    assert datasets.read(p).attrs["env"]["run_id"] == "synthetic"
    assert datasets.read_env(p)["schema_version"] == 1
    # a sibling of the same stem made by another run does not borrow it
    other = datasets.save(_synthetic_table().assign(run_id="other"), tmp_path / "r.parquet")
    assert datasets.read(other).attrs["env"] is None
    # the new name wins over the old one
    datasets.write_env({"run_id": "synthetic", "new": True}, datasets.env_path(p))
    assert datasets.read(p).attrs["env"]["new"] is True


def test_bundled_runs_find_their_old_style_env_json():
    df = datasets.load("h200_sweep")
    assert all(env and env["run_id"] == rid for rid, env in df.attrs["envs"].items())
    # the first session's (schema 1) bundled files were not renamed; data/h200, recorded by
    # `h2dlab record` with schema 2, and data/h200_omp (schema 4) name their fingerprints after
    # the whole file name
    v1 = [
        p
        for p in datasets.DATA_DIR.iterdir()
        if p.is_dir() and p.name not in ("h200", "h200_omp", "h200_survey")
    ]
    assert v1 and not [f for p in v1 for f in p.rglob("*.csv.gz.env.json")]
    # plan 4's 21 runs (the retired runs' tables, record_plan.RETIRED, are gone)
    assert len(list((datasets.DATA_DIR / "h200").rglob("*.csv.gz.env.json"))) == 21


@pytest.mark.parametrize("name", ["", " ", "\t\n", ".", "./", "..", "../..", "./.."])
def test_load_refuses_empty_names_and_the_current_folder(name, tmp_path, monkeypatch):
    datasets.save(_synthetic_table(), tmp_path / "t.csv")  # a table here must not be picked up
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="give a recorded dataset \\(forum_a100"):
        datasets.load(name)


def test_load_refuses_the_data_folder_and_above():
    for where in (datasets.DATA_DIR, datasets.DATA_DIR.parent, "/"):
        with pytest.raises(ValueError, match="the data folder"):
            datasets.load(str(where))


def test_load_says_no_such_file_for_a_missing_path(tmp_path):
    with pytest.raises(datasets.SchemaError, match="no such file or folder"):
        datasets.load(str(tmp_path / "run.csv.gz"))
    with pytest.raises(datasets.SchemaError, match="no such file or folder"):
        datasets.load("run.csv.gz")


def test_load_other_bad_names():
    with pytest.raises(TypeError, match="not NoneType"):
        datasets.load(None)
    with pytest.raises(ValueError, match="NUL byte or spaces"):
        datasets.load(" h200_sweep")
    with pytest.raises(ValueError, match="timeline\\('h200_overlap'\\)"):
        datasets.load("h200_overlap")
    with pytest.raises(ValueError, match="not a benchmark result name"):
        datasets.load_benchmark("../../etc/passwd")


def test_load_a_folder_and_a_path_object(tmp_path):
    datasets.save(_synthetic_table(), tmp_path / "a.csv.gz")
    datasets.save(_synthetic_table().assign(run_id="b"), tmp_path / "b.csv")
    (tmp_path / "c.csv.gz.partial.csv").write_text("half a run")  # still being written: skipped
    df = datasets.load(tmp_path)
    assert len(df) == 12 and df.attrs["run_names"] == {"synthetic": "a", "b": "b"}
    assert df.attrs["dataset"] == str(tmp_path)


def test_runs_dir_is_chosen_by_the_user(monkeypatch, tmp_path):
    monkeypatch.setenv("H2DLAB_RUNS", str(tmp_path / "mine"))
    assert datasets.runs_dir() == tmp_path / "mine"
    monkeypatch.delenv("H2DLAB_RUNS")
    assert datasets.runs_dir() == datasets.DATA_DIR / "runs"  # a checkout: data/runs, ignored by git
    assert not datasets.PACKAGED


def test_bundled_data_and_benchmarks_are_found():
    assert (datasets.DATA_DIR / "forum_a100" / "forum_a100.csv").is_file()
    assert datasets.load_benchmark("h200")["rows"]


def test_csv_cut_mid_row_reads_whole_rows(tmp_path):
    p = datasets.save(_synthetic_table(), tmp_path / "t.csv")
    text = p.read_text()
    p.write_text(text[: text.rstrip().rfind(",") - 3])  # cut inside the last row
    with pytest.warns(UserWarning, match=r"t\.csv: its last line \(\d+ characters\) has no line end"):
        back = datasets.read(p)
    assert len(back) == 5


def test_a_csv_header_naming_a_column_twice_is_refused(tmp_path):
    p = datasets.save(_synthetic_table(), tmp_path / "t.csv")
    head, rest = p.read_text().split("\n", 1)
    p.write_text(head.replace("event_ms", "event_ms,event_ms", 1) + "\n" + rest.replace("\n", ",1\n"))
    with pytest.raises(datasets.SchemaError, match=r"t\.csv: the header names event_ms more than once"):
        datasets.read(p)


def test_unknown_dataset_lists_known():
    with pytest.raises(datasets.SchemaError, match="forum_a100"):
        datasets.load("nope_nothing")


def test_forum_a100_matches_published_table():
    df = datasets.load("forum_a100")
    assert len(df) == 630
    assert set(df.strategy) == {"pin_memory", "pinned_to_cuda", "direct_to_cuda"}
    assert df["event_ms"].isna().all()
    w = df.pivot(index="order", columns="strategy", values="wall_ms")
    # Figures read straight from the post (row: pin, pinned->cuda, direct).
    published = {
        0: (1245.59, 0.33, 0.24),
        13: (1.04, 1.67, 91.19),
        19: (1.16, 120.73, 3.93),
        69: (72.38, 7.37, 13.43),
        137: (140.9, 14.22, 26.63),
        180: (13.51, 161.89, 187.27),
        193: (14.29, 74.24, 113.4),
        205: (14.92, 20.91, 39.28),
        209: (15.01, 21.29, 39.89),
    }
    for row, (pin, pinned, direct) in published.items():
        assert w.loc[row, "pin_memory"] == pin
        assert w.loc[row, "pinned_to_cuda"] == pinned
        assert w.loc[row, "direct_to_cuda"] == direct
    sizes = df[df.strategy == "pin_memory"].sort_values("order")["size_bytes"]
    assert sizes.iloc[0] == 24 * 2 * 1 * 1 * 4096 * 2 and sizes.iloc[-1] == 24 * 2 * 1046 * 4096 * 2
    raw = pd.read_csv(datasets.DATA_DIR / "forum_a100" / "forum_a100.csv")
    assert np.allclose(w["pin_memory"].to_numpy(), raw["pin-memory(ms)"].to_numpy())
    assert np.allclose(w["direct_to_cuda"].to_numpy(), raw["direct to cuda(ms)"].to_numpy())


def test_forum_csv_equals_the_post():
    """Every number of the transcription appears, in order, in the forum post itself."""
    post = datasets.DATA_DIR.parent.parent / "shared" / "reference" / "forum-post.txt"
    if not post.exists():
        pytest.skip("shared/reference is not beside this checkout")
    lines = [ln.strip() for ln in post.read_text().splitlines()]
    raw = pd.read_csv(datasets.DATA_DIR / "forum_a100" / "forum_a100.csv")
    for r in raw.itertuples(index=False):
        want = f"{r[0]} {r[1]} {r[2]:g} {r[3]:g} {r[4]:g}"
        assert want in lines, want


def test_gz_is_gzip(tmp_path):
    p = datasets.save(_synthetic_table(), tmp_path / "t.csv.gz")
    with gzip.open(p, "rt") as fh:
        assert fh.readline().startswith("run_id,order")


@pytest.mark.parametrize("ext", [".csv", ".csv.gz", ".parquet", ".xlsx"])
def test_a_run_id_of_digits_stays_text(tmp_path, ext):
    df = _synthetic_table().assign(run_id="001234567890", shape="1024")
    back = datasets.read(datasets.save(df, tmp_path / f"t{ext}"))
    assert back["run_id"].tolist() == ["001234567890"] * 6 and back["shape"].iloc[0] == "1024"


def _copy_table(src, dst):
    import shutil

    shutil.copy(src, dst)
    shutil.copy(f"{src}.env.json", f"{dst}.env.json")


def test_a_run_in_two_files_of_a_folder_is_refused(tmp_path, capsys):
    """The same run (a copy of a table) in two files would count its rows twice: refused in
    one line naming both files (real tables of data/h200, copied)."""

    src = datasets.DATA_DIR / "h200" / "sweep" / "forum-sizes.csv.gz"
    _copy_table(src, tmp_path / "a.csv.gz")
    _copy_table(src, tmp_path / "b.csv.gz")
    with pytest.raises(datasets.SchemaError, match=r"run \w+ is in both a\.csv\.gz and b\.csv\.gz of "):
        datasets.load(tmp_path)
    assert cli.main(["explain", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "keep one of the two files" in err[0]


def test_explain_reads_a_folder_mixing_an_annotated_table_with_a_plain_one(tmp_path):
    """explain --out's table (with detect()'s columns) beside a plain table of another run:
    the plain run's rows are flagged afresh, and every row gets a verdict (real tables of
    data/h200, one annotated by explain)."""
    from h2dlab.explain import outliers

    plain = datasets.DATA_DIR / "h200" / "sweep" / "forum-sizes.csv.gz"
    annotated = datasets.DATA_DIR / "h200" / "sweep" / "pow2-interleaved.csv.gz"
    assert cli.main(["explain", str(annotated), "--out", str(tmp_path / "a.csv.gz")]) == 0
    _copy_table(plain, tmp_path / "b.csv.gz")
    both = datasets.load(tmp_path)
    assert both["is_outlier"].isna().any()  # the plain table's rows carry no flags yet
    e = outliers.explain(both)
    assert e["is_outlier"].notna().all()
    alone = outliers.explain(datasets.load(plain))
    rid = alone["run_id"].iloc[0]
    assert int(e.loc[e["run_id"] == rid, "is_outlier"].sum()) == int(alone["is_outlier"].sum())
    assert cli.main(["explain", str(tmp_path)]) == 0


def test_csv_edge_cases_of_the_last_line_and_the_header(tmp_path):
    """Helper attack, eighth session: a header alone without a line end was dropped as a cut
    row; trailing blanks warned; a byte-order mark hid a repeated first column; an .xlsx
    repeat was read as error.1."""
    import warnings

    p = datasets.save(_synthetic_table(), tmp_path / "t.csv")
    head = p.read_text().split("\n", 1)[0]
    (tmp_path / "h.csv").write_text(head)  # the header alone, no line end
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        alone = datasets.read(tmp_path / "h.csv")  # as with a line end: a table without rows
    assert len(alone) == 0 and list(alone.columns)[:3] == list(datasets.read(p).columns)[:3]
    (tmp_path / "b.csv").write_text(p.read_text() + "   ")  # blanks after the last line end
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(datasets.read(tmp_path / "b.csv")) == len(datasets.read(p))
    (tmp_path / "bom.csv").write_text("\ufeff" + head + ",run_id\n")
    with pytest.raises(datasets.SchemaError, match="the header names run_id more than once"):
        datasets.read(tmp_path / "bom.csv")
    (tmp_path / "e.csv").write_text(head + ",,\n")
    with pytest.raises(datasets.SchemaError, match="the header names an empty name more than once"):
        datasets.read(tmp_path / "e.csv")
    t = datasets.read(p)
    twice = pd.concat([t, t["error"].rename("error")], axis=1)
    twice.to_excel(tmp_path / "x.xlsx", index=False)
    with pytest.raises(datasets.SchemaError, match=r"x\.xlsx: the header names error more than once"):
        datasets.read(tmp_path / "x.xlsx")


@pytest.mark.parametrize("dry", [False, True])
@pytest.mark.parametrize("where", ["file", "under-file"])
def test_a_runs_variable_that_names_a_file_is_named(tmp_path, capsys, monkeypatch, where, dry):
    """H2DLAB_RUNS pointing at a file: the line said "cannot create .../vm-cpu-<date>: Not a
    directory" (not which setting chose that folder), and --dry-run said nothing."""
    (tmp_path / "afile").write_text("not a folder")
    runs = tmp_path / "afile" if where == "file" else tmp_path / "afile" / "sub"
    monkeypatch.setenv("H2DLAB_RUNS", str(runs))
    line = refused_in_one_line(
        ["record", "--device", "cpu", "--only", "sweep", *(["--dry-run"] if dry else [])],
        ["is a file", f"H2DLAB_RUNS={runs}", "--out"],
        capsys,
        tmp_path,
    )
    assert str(tmp_path / "afile") in line


def test_a_runs_folder_that_cannot_be_made_names_the_variable(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("H2DLAB_RUNS", "/proc/h2dlab-no-such-runs")
    refused_in_one_line(
        ["record", "--device", "cpu", "--only", "sweep"],
        ["cannot create /proc/h2dlab-no-such-runs/", "H2DLAB_RUNS=/proc/h2dlab-no-such-runs"],
        capsys,
        tmp_path,
    )
