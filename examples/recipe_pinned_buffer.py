"""Recipe 2: a batch of the same shape every step. Make a pinned buffer once, copy each
batch into it, send it with ``copy_(non_blocking=True)`` and wait on an event before the
buffer is written again.

A pinned (page-locked) buffer lets the GPU's copy engine read host memory directly, so
the host is free while the copy runs. Pinning costs milliseconds per call: do it once,
never per step. If you make the batch yourself, write it into ``host_buffer()`` and call
``send()`` without a batch: that saves the host copy. Run: python examples/recipe_pinned_buffer.py
"""

import torch


class PinnedBuffer:
    """A pinned host buffer and a device buffer of one shape, made once, reused every step.

    On a CPU-only machine the host buffer is ordinary memory and ``send`` is a plain copy.
    """

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, device: str | torch.device) -> None:
        self.device = torch.device(device)
        cuda = self.device.type == "cuda"
        self.host = torch.empty(shape, dtype=dtype, pin_memory=cuda)  # pinned once, here
        self.gpu = torch.empty(shape, dtype=dtype, device=self.device)
        self.sent = torch.cuda.Event() if cuda else None  # the last copy out of self.host

    def host_buffer(self) -> torch.Tensor:
        """The pinned buffer, once the previous copy has left it (safe to write)."""
        if self.sent is not None:
            self.sent.synchronize()
        return self.host

    def send(self, batch: torch.Tensor | None = None) -> torch.Tensor:
        """Put ``batch`` (or what ``host_buffer()`` holds) on the device; returns the device buffer.

        The copy is queued on the current stream, so kernels queued after it see the data;
        the host returns at once.
        """
        if batch is not None:
            self.host_buffer().copy_(batch)
        self.gpu.copy_(self.host, non_blocking=True)
        if self.sent is not None:
            self.sent.record()
        return self.gpu


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    buf = PinnedBuffer((64, 3, 224, 224), torch.float32, device)
    for step in range(3):
        batch = torch.full((64, 3, 224, 224), float(step))  # stands in for your data
        x = buf.send(batch)
        loss = (x * 2).sum()  # your model; it runs after the copy on the same stream
        assert loss.item() == 2 * step * batch.numel()
    print(f"3 steps through one pinned buffer on {device}")


if __name__ == "__main__":
    main()
