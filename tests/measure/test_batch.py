"""Batches of many tensors on the CPU: seeded sizes that add up, a plan that takes turns,
every method's result equal to its sources, and the command's rows and mistakes."""

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.cli import main as cli
from h2dlab.errors import UsageError
from h2dlab.measure import batch_methods
from h2dlab.measure.batch import BatchSpec, batch, plan_batch
from h2dlab.measure.batch_methods import METHODS, batch_sizes, make_batch
from h2dlab.recording import datasets
from tests.conftest import run_cli

CPU = torch.device("cpu")
ON_CPU = ("loop_to", "loop_non_blocking", "pinned_each", "pinned_flat", "foreach_copy")


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 2000), extra=st.integers(0, 10**6), layout=st.sampled_from(["equal", "mixed"]))
def test_batch_sizes_add_up(n, extra, layout):
    total = 64 * n + 64 * (extra // 64) if layout == "mixed" else n + extra
    sizes = batch_sizes(n, total, layout, seed=3)
    assert len(sizes) == n and sum(sizes) == total
    if layout == "mixed":
        assert min(sizes) >= 64 and all(s % 64 == 0 for s in sizes)
    else:
        assert max(sizes) - min(sizes) <= 1
    assert sizes == batch_sizes(n, total, layout, seed=3)


def test_mixed_sizes_are_mixed_and_seeded():
    a = batch_sizes(256, 2**24, "mixed", seed=0)
    assert max(a) > 10 * min(a) and a != batch_sizes(256, 2**24, "mixed", seed=1)


@pytest.mark.parametrize(("n", "total", "layout"), [(4, 3, "equal"), (4, 192, "mixed"), (2, 200, "mixed")])
def test_batch_sizes_refuse_what_cannot_be(n, total, layout):
    with pytest.raises(ValueError, match="cannot make"):
        batch_sizes(n, total, layout)


def test_make_batch_is_separate_tensors_with_the_source_bytes():
    src = torch.arange(1000, dtype=torch.int32).view(torch.uint8)
    ts = make_batch([10, 20, 30], src)
    assert [t.numel() for t in ts] == [10, 20, 30]
    assert torch.equal(torch.cat(ts), src[:60]) and ts[1].data_ptr() != src.data_ptr() + 10


@pytest.mark.parametrize("name", ON_CPU)
@pytest.mark.parametrize("layout", ["equal", "mixed"])
def test_every_cpu_method_copies_every_tensor(name, layout):
    src = torch.randint(0, 256, (1 << 16,), dtype=torch.uint8)
    ts = make_batch(batch_sizes(37, 64 * 37 * 5, layout, seed=1), src)
    m = batch_methods.get(name)
    m.prepare(ts, CPU)
    for _ in range(2):  # a reused buffer must be refilled
        ys = m.copy(ts)
        assert len(ys) == len(ts)
        assert all(torch.equal(y, t) and y.data_ptr() != t.data_ptr() for y, t in zip(ys, ts, strict=True))
        ts = [t.flip(0).contiguous() for t in ts]
        if name in ("pinned_each", "foreach_copy"):  # prepared copies: the batch of prepare
            break
    assert all(getattr(m, a) is not None for a in m.held if a != "sent")  # sent: a CUDA event only
    m.cleanup()
    assert all(getattr(m, a) is None for a in m.held)  # the buffers are let go


def test_cleanup_lets_go_of_what_prepare_filled():
    held = {n: METHODS[n].held for n in METHODS}
    assert held == {
        "loop_to": (),
        "loop_non_blocking": (),
        "pinned_each": ("pinned",),
        "pinned_flat": ("buf", "sent"),
        "to_device_packed": ("buf", "sent"),
        "foreach_copy": ("pinned", "outs"),
        "tensordict": ("td",),
    }


def test_unavailable_methods_say_why():
    assert "needs CUDA" in batch_methods.available("to_device_packed", CPU)
    assert batch_methods.available("tensordict", CPU)  # not installed here, or needs CUDA
    assert all(batch_methods.available(n, CPU) == "" for n in ON_CPU)
    with pytest.raises(KeyError, match="choose from"):
        batch_methods.get("teleport")


def test_plan_takes_turns_and_uses_fewer_rounds_for_large_batches():
    spec = BatchSpec(counts=(1, 4), totals=(2**20, 2**28), reps=3, reps_large=2, warmup=1, device="cpu")
    p = plan_batch(spec)
    k = len(METHODS)
    assert len(p) == 2 * (1 + 3) * k + 2 * (1 + 2) * k
    assert [r["order"] for r in p] == list(range(len(p)))
    first = p[:k]  # the warm-up round of the first shape: every method once
    assert {r["strategy"] for r in first} == set(METHODS) and all(r["warmup"] for r in first)
    rounds = [tuple(r["strategy"] for r in p[i : i + k]) for i in range(0, len(p), k)]
    assert len(set(rounds)) > 1  # shuffled per round
    assert p == plan_batch(spec)


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"counts": ()}, "no batch counts"),
        ({"counts": (0,)}, "at least 1"),
        ({"layout": "random"}, "layout"),
        ({"methods": ("teleport",)}, "unknown batch method"),
        ({"counts": (1024,), "totals": (1024,), "layout": "mixed"}, "cannot make"),
        ({"reps": 0}, "reps"),
    ],
)
def test_spec_refuses(kw, needle):
    with pytest.raises(UsageError, match=needle):
        BatchSpec(**{"device": "cpu", **kw})


def test_cpu_batch_rows(tmp_path):
    ticks = itertools.count(0, 0.002)
    spec = BatchSpec(counts=(1, 16), totals=(4096, 65536), layout="mixed", reps=2, warmup=1, device="cpu")
    df = batch(spec, out=tmp_path / "b.csv", progress=False, clock=lambda: next(ticks))
    assert len(df) == len(plan_batch(spec)) == 2 * 2 * 3 * len(METHODS)
    ok = df[df.strategy.isin(ON_CPU)]
    assert (ok["error"] == "").all() and ok["wall_ms"].tolist() == pytest.approx([2.0] * len(ok))
    assert df.loc[df.strategy == "to_device_packed", "error"].str.contains("needs CUDA").all()
    assert set(df["n_tensors"]) == {1, 16} and set(df["size_bytes"]) == {4096, 65536}
    assert (df["direction"] == "h2d").all() and df["shape"].str.contains("mixed sizes").all()
    back = datasets.read(tmp_path / "b.csv")
    assert back.attrs["env"]["spec"]["kind"] == "batch" and len(back) == len(df)


class _Wrong(batch_methods.BatchMethod):
    """Synthetic: drops the last tensor's bytes."""

    name = "wrong_test_only"

    def copy(self, tensors):
        return [t.clone() for t in tensors[:-1]] + [torch.zeros_like(tensors[-1])]


def test_a_wrong_batch_copy_is_caught(monkeypatch):
    monkeypatch.setitem(METHODS, _Wrong.name, _Wrong)
    spec = BatchSpec(counts=(4,), totals=(4096,), methods=(_Wrong.name,), reps=2, warmup=0, device="cpu")
    df = batch(spec, progress=False)
    assert df["error"].iloc[0].startswith("wrong result") and df["error"].iloc[1] == ""


def test_cli_batch_and_its_mistakes(tmp_path):
    out = tmp_path / "b.csv"
    r = run_cli("batch", "--device", "cpu", "--counts", "1,4", "--totals", "4KiB", "--reps", "2",
                "--methods", "loop_to,pinned_flat", "--out", str(out), "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert len(datasets.read(out)) == 2 * 3 * 2
    bad = run_cli("batch", "--device", "cpu", "--counts", "0", "--out", str(out))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "at least 1" in bad.stderr
    bad = run_cli("batch", "--device", "cpu", "--counts", "4", "--totals", "128", "--layout", "mixed",
                  "--out", str(out))  # fmt: skip
    assert bad.returncode == 2 and "cannot make" in bad.stderr and "Traceback" not in bad.stderr


def test_an_interrupted_batch_resumes_to_the_whole_plan(tmp_path, capsys):
    """An interrupted `h2dlab batch` said "run it again to finish", and running it again
    refused (the table exists; batch had neither --resume nor --force): its rows could
    never be completed, nor could `h2dlab record --resume` finish a batch experiment."""
    from h2dlab.measure.batch import BatchSpec, batch, plan_batch
    from h2dlab.measure.recorder import StopFlag

    spec = BatchSpec(counts=(1, 4), totals=(4096, 65536), reps=2, warmup=1, device="cpu")
    out = tmp_path / "b.csv"
    stop, calls = StopFlag(), iter(range(10**6))

    def clock():  # a fake host clock that asks for a stop after a few copies
        if next(calls) == 40:
            stop.request()
        return 0.0

    first = batch(spec, out=out, progress=False, clock=clock, stop=stop)
    planned = plan_batch(spec)
    assert first.attrs["stopped"] and 0 < len(first) < len(planned)
    argv = ["batch", "--device", "cpu", "--counts", "1,4", "--totals", "4KiB,64KiB", "--reps", "2"]
    argv += ["--warmup", "1", "--out", str(out), "--no-progress"]
    assert cli.main(argv) == 2  # kept, never replaced unasked
    assert "--resume" in capsys.readouterr().err
    assert cli.main([*argv, "--resume"]) == 0
    whole = datasets.read(out)
    assert len(whole) == len(planned)
    assert whole["run_id"].nunique() == 1  # continued, not started over
    assert sorted(whole["order"]) == list(range(len(planned)))
    assert whole["run_id"].iloc[0] == first["run_id"].iloc[0]  # the first rows are kept as they were
    cols = ["order", "strategy", "size_bytes", "n_tensors", "rep", "warmup"]
    head = whole.sort_values("order").head(len(first))[cols].reset_index(drop=True)
    assert head.astype(str).equals(first[cols].reset_index(drop=True).astype(str))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--methods", "loop_to,loop_to"], "batch method 'loop_to' is named twice"),
        (["--counts", "1,,2"], "has an empty entry"),
        (["--counts", ",1"], "has an empty entry"),
    ],
)
def test_batch_refuses_a_repeated_method_or_an_empty_count_before_measuring(capsys, tmp_path, args, says):
    """A method named twice ran the whole plan, then failed on the table's key and lost it;
    an empty count entry was silently dropped."""
    out = tmp_path / "b.csv"
    argv = ["batch", "--device", "cpu", "--no-progress", "--out", str(out), "--totals", "1KiB", "--reps", "1"]
    try:
        code = cli.main([*argv, *args] if "--counts" in args else [*argv, "--counts", "1", *args])
    except SystemExit as exc:  # argparse's own refusal: its usage line, then the error
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and says in err.strip().splitlines()[-1] and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob("b.csv*"))
