"""Both directions at once, on the CPU against a fake CUDA: the plan, the row pairs
(same start, host time and evidence; each direction its own event time), the byte
check, and the command's answer on a machine without CUDA."""

import torch

from h2dlab.cli import main as cli
from h2dlab.measure.duplex import DuplexSpec, duplex, plan_duplex
from h2dlab.recording import datasets
from tests.conftest import run_cli
from tests.fake_cuda import fake_cuda  # noqa: F401 - fixture


def test_plan_pairs_the_duplex_rows():
    spec = DuplexSpec(sizes=(4096, 1024), reps=3, warmup=1, device="cuda:0")
    p = plan_duplex(spec)
    assert len(p) == 2 * (1 + 3) * 4  # per round: alone h2d, alone d2h, duplex h2d + d2h
    assert [r["size_bytes"] for r in p[:16]] == [1024] * 16
    duo = [r for r in p if r["strategy"] == "duplex"]
    pairs = {}
    for r in duo:
        pairs.setdefault(r["copy"], []).append(r["direction"])
    assert all(sorted(v) == ["d2h", "h2d"] for v in pairs.values()) and len(pairs) == 8
    alone = {(r["direction"], r["size_bytes"], r["rep"], r["warmup"]) for r in p if r["strategy"] == "alone"}
    assert len(alone) == 2 * 2 * 4


def test_duplex_rows_on_a_fake_cuda(fake_cuda, tmp_path):  # noqa: F811
    spec = DuplexSpec(sizes=(4096, 65536), reps=2, warmup=1)
    df = duplex(spec, out=tmp_path / "d.csv", progress=False, device=torch.device("cpu"))
    assert len(df) == len(plan_duplex(spec)) == 2 * 3 * 4 and (df["error"] == "").all()
    duo = df[df.strategy == "duplex"]
    for _, g in duo.groupby(["size_bytes", "rep", "warmup"]):
        assert sorted(g["direction"]) == ["d2h", "h2d"]
        assert g["t_s"].nunique() == 1 and g["wall_ms"].nunique() == 1
    assert (duo["event_ms"] == 1.0).all()  # the fake events: each direction's own end
    assert set(df.loc[df.strategy == "alone", "direction"]) == {"h2d", "d2h"}
    back = datasets.read(tmp_path / "d.csv")
    assert back.attrs["env"]["spec"]["kind"] == "bidir" and len(back) == 24


def test_duplex_byte_check(fake_cuda, monkeypatch):  # noqa: F811
    from h2dlab.measure import duplex as mod

    real = mod._Pair.one

    def broken(self, direction):
        real(self, direction)
        if direction == "d2h":
            self.h_dst.zero_()

    monkeypatch.setattr(mod._Pair, "one", broken)
    df = duplex(DuplexSpec(sizes=(4096,), reps=1, warmup=0), progress=False, device=torch.device("cpu"))
    bad = df[df["error"] != ""]
    assert set(bad["direction"]) == {"d2h"} and bad["error"].str.startswith("wrong result").all()
    assert len(bad) == 2  # alone and duplex, each checked once


def test_cli_duplex_without_cuda_is_one_line(tmp_path):
    if torch.cuda.is_available():
        import pytest

        pytest.skip("this machine has CUDA")
    r = run_cli("duplex", "--out", str(tmp_path / "d.csv"))
    # no CUDA is a condition of this machine, not a usage mistake: exit 1 (README: exit codes)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "CUDA" in r.stderr
    r = run_cli("duplex", "--device", "cpu", "--out", str(tmp_path / "d.csv"))
    assert r.returncode == 2 and "needs a CUDA device" in r.stderr


def test_duplex_takes_force_and_names_it(tmp_path, capsys):
    """duplex had no --force, yet an existing --out was refused with "force a new run"."""
    out = tmp_path / "d.csv"
    out.write_text("an earlier table\n")
    assert cli.main(["duplex", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--force" in err[0] and "--resume" not in err[0]
    assert out.read_text() == "an earlier table\n"
