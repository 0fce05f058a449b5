"""Recipe 6: results back to the host. Copy into a pinned buffer made once with
``non_blocking=True``, record an event, and wait on that event only when you read them.

``y.cpu()`` (or ``.item()``) makes the host wait for every kernel queued before it. With a
pinned destination the copy is queued like a kernel, and the host waits only when it needs
the numbers, e.g. one step later. Run: python examples/recipe_results_to_host.py
"""

import torch


class ResultsToHost:
    """A pinned host buffer for results of one shape; ``start`` queues the copy, ``get`` waits for it.

    Read (or clone) what ``get`` returns before the next ``start``: the buffer is reused.
    On a CPU-only machine ``start`` is a plain copy.
    """

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, device: str | torch.device) -> None:
        cuda = torch.device(device).type == "cuda"
        self.host = torch.empty(shape, dtype=dtype, pin_memory=cuda)  # pinned once
        self.done = torch.cuda.Event() if cuda else None

    def start(self, y: torch.Tensor) -> None:
        """Queue the copy of ``y`` (on the device) into the pinned buffer; returns at once."""
        self.host.copy_(y, non_blocking=True)
        if self.done is not None:
            self.done.record()

    def get(self) -> torch.Tensor:
        """The results, once the copy has finished."""
        if self.done is not None:
            self.done.synchronize()
        return self.host


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    back = ResultsToHost((64, 1000), torch.float32, device)
    for step in range(3):
        logits = torch.full((64, 1000), float(step), device=device)  # your model's output
        back.start(logits)
        # ... queue the next step's work here; the host does not wait ...
        assert torch.equal(back.get(), torch.full((64, 1000), float(step)))
    print(f"3 results copied back from {device} into one pinned buffer")


if __name__ == "__main__":
    main()
