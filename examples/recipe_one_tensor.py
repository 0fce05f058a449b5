"""Recipe 1: one large tensor in ordinary (pageable) memory, copied to the GPU once.

Call ``x.to(device)`` and nothing else. Pinning it first (``x.pin_memory()``) copies it
twice on the host and may make a new pinned block, which costs more than the faster
copy saves when the tensor crosses only once. Run: python examples/recipe_one_tensor.py
"""

import torch


def send_once(x: torch.Tensor, device: str | torch.device) -> torch.Tensor:
    """``x`` on ``device`` by one plain copy (the call blocks until the copy is done)."""
    return x.to(device)


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(64, 3, 224, 224)  # 36.8 MiB (38.5 MB) of float32, pageable
    y = send_once(x, device)
    assert torch.equal(y.cpu(), x)
    print(f"{x.nbytes / 2**20:.1f} MiB copied to {y.device}")


if __name__ == "__main__":
    main()
