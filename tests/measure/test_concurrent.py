"""Several devices at once (run here with CPU processes): every option of the spec reaches
every process, and the command line builds one spec for both paths."""

import argparse
import dataclasses

import pytest

from h2dlab.cli import main as cli
from h2dlab.measure.concurrent import concurrent
from h2dlab.measure.plan import plan_spec
from h2dlab.measure.spec import SweepSpec
from h2dlab.recording import datasets


def test_every_spec_option_reaches_every_process(tmp_path):
    spec = SweepSpec(
        ("pageable", "pageable_non_blocking"),
        (4096, 2**16),
        device="cpu",
        reps=3,
        warmup=0,
        reps_large=None,
        order="interleaved",
        seed=3,
        empty_cache=True,
        empty_host_cache_each_size=True,
        dtype="float16",
    )
    out = tmp_path / "c.csv"
    df = concurrent(spec, gpus="2", out=out)
    assert not df.attrs["stopped"] and df.attrs["planned_rows"] == 2 * 12
    back = datasets.read(out)
    recorded = back.attrs["env"]["spec"]
    measured = {k: v for k, v in recorded.items() if k not in ("kind", "gpus", "worlds")}
    assert measured == {k: v for k, v in spec.to_dict().items() if k != "kind"}
    assert recorded["kind"] == "concurrent" and recorded["worlds"] == [2]
    want = plan_spec(spec)
    assert sorted(back["gpu"].unique()) == [0, 1]
    for _gpu, rows in back.groupby("gpu"):
        assert rows["dtype"].eq("float16").all() and rows["empty_cache"].all()
        assert rows["shape"].iloc[0] in ("(2048,)", "(32768,)")
        got = rows.sort_values("order")[["strategy", "size_bytes", "rep", "warmup"]].to_dict("records")
        assert got == [{k: r[k] for k in ("strategy", "size_bytes", "rep", "warmup")} for r in want]


def _measure_options():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["measure"]


# What each option is set to in the check below (a value other than its default).
OTHER = {
    "--device": "cpu",
    "--sizes": "1KiB,4KiB",
    "--strategies": "pageable",
    "--reps": "3",
    "--reps-large": "2",
    "--warmup": "0",
    "--order": "interleaved",
    "--seed": "7",
    "--empty-cache": None,
    "--empty-host-cache": None,
    "--dtype": "float16",
    "--pause": "1",
    "--evidence": "full",
}
# Options that say where and how to run, not what: they are not part of the spec.
# --reference times the same cells with torch.utils.benchmark after the sweep: it adds a check
# beside the rows (env.json's 'reference'), it does not change what the rows measure.
# --json only changes what is printed at the end (one JSON object on stdout); both the one-GPU
# and the --gpus path hand it to cli.results.finish.
NOT_SPEC = {
    "--out",
    "--resume",
    "--force",
    "--max-hours",
    "--gpus",
    "--no-progress",
    "--help",
    "--reference",
    "--json",
}


@pytest.mark.parametrize("gpus", [None, "2"])
def test_every_measure_option_lands_in_the_one_spec(gpus):
    m = _measure_options()
    flags = {
        a.option_strings[-1] if a.option_strings[-1].startswith("--") else a.option_strings[0]
        for a in m._actions
    }
    assert flags - NOT_SPEC == set(OTHER), "a new option must be added to the spec (and to OTHER)"
    base = ["measure", "--out", "x.csv"] + (["--gpus", gpus] if gpus else [])
    default = cli.spec_from_args(cli.build_parser().parse_args(base))
    for flag, value in OTHER.items():
        args = cli.build_parser().parse_args([*base, flag, *([value] if value else [])])
        spec = cli.spec_from_args(args)
        changed = [
            f.name for f in dataclasses.fields(spec) if getattr(spec, f.name) != getattr(default, f.name)
        ]
        assert len(changed) == 1, (flag, changed)
