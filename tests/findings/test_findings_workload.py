"""The decision table is computed from the workload table (tested on a synthetic one):
exposed copy time, the ratio against the way a recipe replaces, and when it does not pay."""

import re

import numpy as np
import pytest

from h2dlab.findings import workload as fw
from h2dlab.recording import tableio
from tests.synthetic_workload import SYNTHETIC_MS, synthetic_workload


def test_exposed_is_each_way_s_median_step_minus_the_resident_one():
    df = synthetic_workload()
    ex = fw.exposed(df)
    for way, ms in SYNTHETIC_MS.items():
        timed = df[(df["strategy"] == way) & ~df["warmup"]]
        assert ex.loc[way, "step_ms"] == pytest.approx(np.median(timed["wall_ms"]))
        assert ex.loc[way, "step_ms"] == pytest.approx(ms)  # warm-ups (3x, 2x) left out
        assert ex.loc[way, "exposed_ms"] == pytest.approx(ms - SYNTHETIC_MS["resident"])
    assert ex.loc["resident", "exposed_ms"] == 0 and ex.loc["results_pinned", "direction"] == "d2h"


def test_decision_rows_carry_the_measured_numbers_and_ratios():
    f = fw.decision(synthetic_workload())
    t = f.table.set_index("way")
    assert list(t.index) == [r.way for r in fw.ROWS]
    assert t.loc["pinned_buffer", "times"] == pytest.approx(11.5 / 8.0)
    assert t.loc["loader_prefetch", "exposed_ms"] == pytest.approx(0.3)
    assert t.loc["pageable_to", "times"] == pytest.approx(16.0 / 11.5)  # against pinning first
    assert f.holds and t["pays"].all()
    md = f.values["markdown"].splitlines()
    assert len(md) == 2 + len(fw.ROWS)
    assert "| speed-up (their step ÷ yours; under 1: slower) |" in md[0]  # 0.66 must not read as "faster"
    row = next(line for line in md if line.startswith("| A batch of one shape"))
    assert (
        "event (`recipe_pinned_buffer.py`) | 8.00 | 3.50 | `x.to(device)`: 11.5 ms, 7.00 exposed | 1.44× |"
        in row
    )


def test_the_answer_names_the_two_settings_and_computes_its_figures():
    f = fw.decision(synthetic_workload())
    a = f.values["answer"]
    assert "`DataLoader(pin_memory=True)`" in a and "non_blocking=True" in a
    assert "7.00 ms to each step by plain `.to()`, 0.60 ms from a pinned loader and 0.30 ms" in a
    assert "36.75 MiB" in a
    for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", a):
        assert len(sentence.split()) <= 40, sentence
    assert f.values["footer"].startswith("data: synthetic · synthetic GPU")
    assert "11 products of 1024 x 1024" in f.values["footer"]


def test_the_answer_does_not_recommend_a_pinned_loader_that_did_not_pay():
    # as in the 2026-12-03 H200 recording: the pinned loader's steps slower than the plain loader's
    ms = {**SYNTHETIC_MS, "loader_pinned": SYNTHETIC_MS["loader_pageable"] + 2.0}
    f = fw.decision(synthetic_workload(ms))
    t = f.table.set_index("way")
    assert not t.loc["loader_pinned", "pays"]
    a = f.values["answer"]
    best = t[t["pays"]]["times"].idxmax()
    assert a.startswith(
        f"Pin once and copy without blocking: {t.loc[best, 'code']} (`recipe_{t.loc[best, 'recipe']}.py`)"
    )
    assert f"{t.loc[best, 'times']:.2f}× faster steps than {t.loc[best, 'against_code']} here" in a
    assert (
        "`DataLoader(pin_memory=True)` with `.to(device, non_blocking=True)` did not pay in this recording."
        in a
    )
    for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z`])", a):
        assert len(sentence.split()) <= 40, sentence
    assert "did not pay" not in fw.decision(synthetic_workload()).values["answer"]


def test_a_recipe_within_the_noise_is_said_not_to_pay():
    ms = {**SYNTHETIC_MS, "results_pinned": SYNTHETIC_MS["results_cpu"]}
    f = fw.decision(synthetic_workload(ms))
    t = f.table.set_index("way")
    assert not t.loc["results_pinned", "pays"] and not f.holds
    assert t.loc["results_pinned", "when_not"].startswith(
        "did not pay here: its steps and `y.cpu()`'s overlap"
    )
    assert t.loc["loader_pinned", "when_not"] == fw.ROWS[2].caveat


def test_a_recipe_slower_than_its_naive_way_says_so_and_no_negative_time_is_added():
    ms = {**SYNTHETIC_MS, "pinned_buffer": 14.0, "loader_prefetch": 4.4}
    f = fw.decision(synthetic_workload(ms))
    t = f.table.set_index("way")
    assert t.loc["pinned_buffer", "when_not"] == "did not pay here: its step was slower than `x.to(device)`'s"
    assert t.loc["loader_prefetch", "exposed_ms"] == pytest.approx(-0.1)  # shown as measured in the table
    assert "and nothing measurable with a side-stream prefetch" in f.values["answer"]


def test_a_way_missing_or_failed_is_said_not_measured():
    ms = {k: v for k, v in SYNTHETIC_MS.items() if k != "many_packed"}
    df = synthetic_workload(ms)
    df.loc[df["strategy"] == "loader_prefetch", "error"] = "RuntimeError: no side stream"
    f = fw.decision(df)
    t = f.table.set_index("way")
    assert t.loc["many_packed", "when_not"] == "not measured: not in this recording"
    assert t.loc["loader_prefetch", "when_not"] == "not measured: RuntimeError: no side stream"
    assert np.isnan(t.loc["many_packed", "step_ms"]) and "| – |" in f.values["markdown"]


def _recording(folder, df):
    (folder / "workload").mkdir(parents=True)
    tableio.save(df, folder / "workload" / "steps.csv.gz", env=df.attrs["envs"]["synthetic"])
    return folder


def test_generator_rewrites_only_the_readme_block(tmp_path, capsys):
    rec = _recording(tmp_path / "synthetic_rec", synthetic_workload())
    readme = tmp_path / "README.md"
    readme.write_text(f"# top\n\n{fw.START}\nold\n{fw.END}\n\nrest\n")
    assert fw.main([str(rec), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert (
        text.startswith("# top\n\n" + fw.START) and text.endswith(fw.END + "\n\nrest\n") and "old" not in text
    )
    assert "| Many small tensors every step |" in text and "data: synthetic_rec (workload)" in text
    assert fw.main([str(rec)]) == 0 and capsys.readouterr().out.startswith(fw.START)


def test_generator_refuses_in_one_line(tmp_path, capsys):
    rec = _recording(tmp_path / "r", synthetic_workload())
    plain = tmp_path / "plain.md"
    plain.write_text("no markers\n")
    assert fw.main([str(rec), "--readme", str(plain)]) == 2
    assert plain.read_text() == "no markers\n"
    assert fw.main([str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no <!-- workload-table:start -->" in err[0] and "no recording" in err[1]


def test_readme_opens_with_the_answer_and_its_block_follows_the_recording():
    from h2dlab.recording import session
    from tests.conftest import ROOT

    text = (ROOT / "README.md").read_text()
    top = "\n".join(text.splitlines()[:40])
    assert "pin_memory=True" in top and "non_blocking=True" in top
    assert text.count(fw.START) == 1 and text.count(fw.END) == 1 and text.index(fw.START) < len(top)
    for r in fw.ROWS:  # every situation, with its recipe file, on the first screen
        assert f"| {r.situation} |" in top and f"`recipe_{r.recipe}.py`" in top
    rec = session.recording("h200")
    if rec.has("workload"):  # once recorded, the block is what the generator makes of it
        block = fw.readme_block(rec.table("workload"), f"{rec.name} (workload)")
        assert block in text, "regenerate: python -m h2dlab.findings.workload data/h200 --readme README.md"
    else:
        assert "no `workload` run yet" in top and "step ms" not in top


def test_footer_calls_every_figure_host_side_and_says_what_the_loader_rows_also_wait_for():
    # synthetic: loader_pageable 12.0 ms, pageable_to 11.5 ms, resident 4.5 ms; the spec has no workers
    footer = fw.decision(synthetic_workload()).values["footer"]
    assert "host-side" in footer
    assert (
        "exposed 7.50 ms against 7.00 ms for `x.to(device)` of the same batch, 0.50 ms that is not the copy."
        in footer
    )
    assert "num_workers" not in footer  # not in the synthetic spec: not invented
    df = synthetic_workload()
    df.attrs["envs"] = {"x": {**df.attrs.get("env", {}), "spec": {"workers": 4}}}
    assert "(`num_workers=4`)" in fw.decision(df).values["footer"]
    # without the unpinned loader there is nothing to compare: no note
    no_loader = synthetic_workload({k: v for k, v in SYNTHETIC_MS.items() if k != "loader_pageable"})
    assert "not the copy" not in fw.decision(no_loader).values["footer"]
    for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z`])", fw.decision(df).values["footer"]):
        assert len(sentence.split()) <= 40, sentence


def test_the_answer_says_when_pinning_each_batch_ties_with_pinning_once():
    # synthetic: pinned_buffer 8.0 ms, pin_memory_each_step 16.0 ms (spread +-2 %): apart, no note
    assert "Pinning every batch afresh" not in fw.decision(synthetic_workload()).values["answer"]
    tie = synthetic_workload({**SYNTHETIC_MS, "pin_memory_each_step": 8.05})
    a = fw.decision(tie).values["answer"]
    assert (
        "Pinning every batch afresh (`x.pin_memory().to(device)`, 8.05 ms a step) came within the quartiles"
        in a
    )
    assert "of the buffer made once (8.00 ms) here." in a
    for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z`])", a):
        assert len(sentence.split()) <= 40, sentence


def test_a_pinned_loader_that_waited_longer_for_its_batches_is_said_to_be_loader_bound():
    """Synthetic: the pinned loader's steps slower and its recorded wait in next() longer
    than the unpinned loader's: its row says the loader set the pace, with both waits, and
    the footer lists every loader's wait."""
    ms = {**SYNTHETIC_MS, "loader_pinned": SYNTHETIC_MS["loader_pageable"] + 2.0}
    df = synthetic_workload(ms)
    df.attrs["envs"]["synthetic"]["spec"]["loader_wait_ms"] = {
        "loader_pageable": 2.5, "loader_pinned": 6.25, "loader_prefetch": 6.5
    }  # fmt: skip
    f = fw.decision(df)
    when = f.table.set_index("way").loc["loader_pinned", "when_not"]
    assert "waited 6.25 ms for each batch, against 2.50 ms unpinned" in when
    assert "6.25 ms with the pinned loader" in f.values["footer"]
    assert "2.50 ms with the unpinned loader" in f.values["footer"]
    # without the waits (older recordings) nothing about them is said
    plain = fw.decision(synthetic_workload(ms))
    assert "waited" not in plain.table.set_index("way").loc["loader_pinned", "when_not"]
