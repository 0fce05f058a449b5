"""The doctor on four real torch.profiler traces from the lead's H200 probe
(tests/data/probe_traces/README.md): what each trace states about itself is read right."""

from __future__ import annotations

from pathlib import Path

import pytest

from h2dlab.doctor.sites import analyse
from h2dlab.doctor.trace import read_trace

HERE = Path(__file__).resolve().parents[1] / "data" / "probe_traces"
BATCH = 64 * 3 * 224 * 224 * 4  # the probe's float32 batch, bytes


def _a(name):
    return analyse(read_trace(HERE / f"{name}.json.gz"))


@pytest.mark.parametrize(
    "name, direction, memory, sync",
    [
        ("pageable_to", "h2d", "pageable", True),
        ("dataloader_pin1", "h2d", "pinned", False),
        ("side_stream", "h2d", "pinned", False),
        ("d2h_pinned", "d2h", "pinned", False),
    ],
)
def test_a_real_trace_gives_five_steps_of_one_batch_copy_each(name, direction, memory, sync):
    a = _a(name)
    c = a.copies[a.copies["step"] >= 0]
    assert a.steps == 5 and len(c) == 5
    assert set(c["direction"]) == {direction} and set(c["host_memory"]) == {memory}
    assert set(c["bytes"]) == {BATCH} and set(c["synchronous"]) == {sync}
    assert sorted(c["step"]) == [0, 1, 2, 3, 4]


def test_a_stack_trace_names_the_site_by_the_users_line():
    (site,) = set(_a("pageable_to").sites["site"])
    assert site.startswith("traces.py(") and "<lambda>" in site


def test_a_side_stream_copy_is_mostly_hidden_and_a_same_stream_one_is_not():
    side = _a("side_stream").copies
    assert (side["exposed_ms"] < side["gpu_ms"]).all()
    assert side["stream"].nunique() == 1 and side["stream"].iat[0] != 7
    page = _a("pageable_to").copies
    assert (page["exposed_ms"] == page["gpu_ms"]).all()


def test_the_dataloader_is_seen_and_its_pinning_charged_to_the_copy():
    a = _a("dataloader_pin1")
    assert a.has_dataloader
    c = a.copies[a.copies["step"] >= 0]
    assert (c["idle_wait_ms"] > c["gpu_ms"]).all()  # pinning 36.75 MiB on the host takes longer than the copy
