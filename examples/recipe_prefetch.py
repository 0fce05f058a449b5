"""Recipe 4: copy batch i+1 on a side stream while step i computes.

``Prefetcher`` wraps any iterable of host batches. It issues the next batch's copy on
its own CUDA stream, so the copy engine and the compute kernels work at once. Give it
pinned batches (e.g. from ``DataLoader(pin_memory=True)``): a copy from pageable memory
cannot run beside compute. ``wait_stream`` makes the step wait for its batch on the GPU,
not on the host; ``record_stream`` keeps the batch's memory from being reused too early.
Run: python examples/recipe_prefetch.py
"""

import torch


def _apply(fn, batch):
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    return type(batch)(fn(t) for t in batch)


class Prefetcher:
    """Iterate device batches; the copy of the next one overlaps the current step.

    On a CPU-only machine it copies with a plain ``.to(device)``.
    """

    def __init__(self, batches, device: str | torch.device) -> None:
        self.batches = iter(batches)
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self.ready = None
        self._load()

    def _load(self) -> None:
        cpu = next(self.batches, None)
        if cpu is None or self.stream is None:
            self.ready = None if cpu is None else _apply(lambda t: t.to(self.device), cpu)
            return
        with torch.cuda.stream(self.stream):
            self.ready = _apply(lambda t: t.to(self.device, non_blocking=True), cpu)

    def __iter__(self):
        return self

    def __next__(self):
        if self.ready is None:
            raise StopIteration
        batch = self.ready
        if self.stream is not None:
            main = torch.cuda.current_stream(self.device)
            main.wait_stream(self.stream)  # the step's kernels wait for this batch's copy
            _apply(lambda t: t.record_stream(main), batch)  # used on main: freed only after
        self._load()  # the next copy starts now, beside this step's compute
        return batch


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    pin = device == "cuda"
    host = [torch.full((64, 3, 224, 224), float(i), pin_memory=pin) for i in range(4)]
    total = 0.0
    for x in Prefetcher(host, device):
        total += (x @ x.transpose(-1, -2)).mean().item() ** 0.5  # your step
    assert abs(total - 224**0.5 * (0 + 1 + 2 + 3)) < 1e-3  # each step saw its own batch
    print(f"4 steps on {device}, each copy beside the step before it")


if __name__ == "__main__":
    main()
