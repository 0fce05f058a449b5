"""h2dlab.profile() on a CUDA GPU writes a trace the doctor reads right (the bundled traces'
ground truth is checked in tests/doctor/test_doctor_traces.py, which needs no GPU)."""

from __future__ import annotations

import torch

import h2dlab
from h2dlab.doctor import diagnose
from h2dlab.doctor.verdict import Machine

#: a synthetic machine for the verdicts (this test checks the reading, not the estimates)
SYNTH = Machine(
    "synthetic", "a synthetic machine", {"pinned_reuse": (0.01, 50e6), "pin_then_copy": (0.05, 8e6)}
)


def test_profile_of_a_pageable_and_a_pinned_copy_gives_two_sites_of_three_steps(tmp_path):
    x = torch.randn(1024, 1024)
    xp = torch.randn(1024, 1024).pin_memory()
    w = torch.randn(1024, 1024, device="cuda")
    with h2dlab.profile(tmp_path / "t.json.gz", steps=3) as p:
        for _ in range(5):
            a = x.to("cuda")
            b = xp.to("cuda", non_blocking=True)
            float((a @ w + b).sum())
            p.step()
    dx = diagnose(tmp_path / "t.json.gz", machine=SYNTH)
    c = dx.analysis.copies
    h2d = c[(c["direction"] == "h2d") & (c["step"] >= 0)]
    assert dx.steps == 3
    assert sorted(h2d["source_memory"]) == ["pageable"] * 3 + ["pinned"] * 3
    assert set(h2d["bytes"]) == {4 * 1024 * 1024}
    assert list(h2d.sort_values("source_memory")["synchronous"]) == [True] * 3 + [False] * 3
    assert (h2d["exposed_ms"] <= h2d["gpu_ms"] + 1e-9).all() and (h2d["gpu_ms"] > 0).all()
