"""A fake torch.cuda for the CPU tests of the d2h, duplex and batch code paths: streams,
events and synchronisation that do nothing, so the loops run for real on host tensors
(a "device" tensor is a host tensor). Synthetic: nothing here is measured."""

import contextlib

import pytest
import torch


class FakeEvent:
    def __init__(self, enable_timing=False):
        self.recorded = 0

    def record(self, stream=None):
        self.recorded += 1

    def synchronize(self):
        pass

    def query(self):
        return True

    def elapsed_time(self, other):
        return 1.0


class FakeStream:
    def __init__(self, device=None):
        self.waits = 0

    def wait_stream(self, other):
        self.waits += 1

    def wait_event(self, event):
        self.waits += 1

    def synchronize(self):
        pass


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda's streams, events and synchronisation as no-ops; returns the current stream."""
    return install(monkeypatch)


def install(monkeypatch):
    """Put the fake streams, events and synchronisation in torch.cuda (undone by
    ``monkeypatch``); return the current stream."""
    current = FakeStream()
    for name, value in {
        "is_available": lambda: True,
        "is_initialized": lambda: False,
        "current_device": lambda: 0,
        "device_count": lambda: 1,
        "Event": FakeEvent,
        "Stream": FakeStream,
        "current_stream": lambda device=None: current,
        "stream": lambda s: contextlib.nullcontext(),
        "synchronize": lambda device=None: None,
        "empty_cache": lambda: None,
    }.items():
        monkeypatch.setattr(torch.cuda, name, value)
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, s: None)
    return current
