"""Recipe 5: many small tensors. Pack them into one pinned buffer made once, copy it in one
go, and use views of the device copy.

Each copy has a fixed cost of some microseconds, so a loop of ``.to()`` over hundreds of
small tensors pays it hundreds of times. The other ways are here to compare, each named
by what it pays for: ``pin_each_then_copy`` pins every tensor every time (counted);
``foreach_pinned_beforehand`` needs sources that were pinned before (not counted);
``tensordict_to`` pins by threads (counted) and needs the optional ``tensordict`` package.
Run: python examples/recipe_many_tensors.py
"""

import torch


def loop_to(tensors: list[torch.Tensor], device: str | torch.device) -> list[torch.Tensor]:
    """The naive way: one blocking copy per tensor."""
    return [t.to(device) for t in tensors]


def pin_each_then_copy(tensors: list[torch.Tensor], device: str | torch.device) -> list[torch.Tensor]:
    """Each tensor pinned now (paid here, every call), then copied without blocking."""
    if torch.device(device).type != "cuda":
        return loop_to(tensors, device)
    return [t.pin_memory().to(device, non_blocking=True) for t in tensors]


def foreach_pinned_beforehand(pinned: list[torch.Tensor], outs: list[torch.Tensor]) -> list[torch.Tensor]:
    """One ``torch._foreach_copy_`` from sources pinned beforehand into device tensors made beforehand."""
    torch._foreach_copy_(outs, pinned, non_blocking=True)
    return outs


def tensordict_available() -> str:
    """Empty if TensorDict can be imported, else why not (it is optional)."""
    try:
        import tensordict  # noqa: F401
    except ImportError:
        return "tensordict is not installed (pip install tensordict): its way is left out"
    return ""


def tensordict_to(tensors: list[torch.Tensor], device: str | torch.device) -> list[torch.Tensor]:
    """TensorDict's ``.to(device, non_blocking_pin=True)``: pins with 8 threads (counted), then copies."""
    from tensordict import TensorDict

    td = TensorDict({f"t{i}": t for i, t in enumerate(tensors)}, batch_size=[])
    pin = torch.device(device).type == "cuda"
    out = td.to(device, non_blocking_pin=pin, num_threads=8) if pin else td.to(device)
    return [out[f"t{i}"] for i in range(len(tensors))]


class PackedSender:
    """One pinned buffer for a list of tensors whose shapes repeat every step; one copy each step.

    ``send`` packs the tensors into the buffer (host copies, counted), copies the buffer
    without blocking, and returns views of the device copy with the original shapes.
    """

    ALIGN = 16  # bytes: each tensor starts where any dtype may start

    def __init__(self, like: list[torch.Tensor], device: str | torch.device) -> None:
        self.device = torch.device(device)
        cuda = self.device.type == "cuda"
        starts, end = [], 0
        for t in like:
            starts.append(end)
            end += -(-t.nbytes // self.ALIGN) * self.ALIGN
        self.host = torch.empty(end, dtype=torch.uint8, pin_memory=cuda)  # pinned once
        self.gpu = torch.empty(end, dtype=torch.uint8, device=self.device)
        self.sent = torch.cuda.Event() if cuda else None

        def views(flat):
            return [
                flat[s : s + t.nbytes].view(t.dtype).view(t.shape) for s, t in zip(starts, like, strict=True)
            ]

        self.host_views, self.gpu_views = views(self.host), views(self.gpu)

    def send(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """The tensors on the device, as views of one buffer (valid until the next ``send``)."""
        if self.sent is not None:
            self.sent.synchronize()  # the previous copy has left the buffer
        for view, t in zip(self.host_views, tensors, strict=True):
            view.copy_(t)
        self.gpu.copy_(self.host, non_blocking=True)
        if self.sent is not None:
            self.sent.record()
        return self.gpu_views


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tensors = [torch.randn(3, 224, 224) for _ in range(64)] + [torch.arange(64)]
    sender = PackedSender(tensors, device)
    for got in (loop_to(tensors, device), pin_each_then_copy(tensors, device), sender.send(tensors)):
        assert all(torch.equal(g.cpu(), t) for g, t in zip(got, tensors, strict=True))
    why = tensordict_available()
    if not why:
        assert all(
            torch.equal(g.cpu(), t) for g, t in zip(tensordict_to(tensors, device), tensors, strict=True)
        )
    print(f"{len(tensors)} tensors on {device} by each way" + (f"; {why}" if why else ""))


if __name__ == "__main__":
    main()
