"""Recipe 3: a ``DataLoader`` with ``pin_memory=True``, and ``.to(device, non_blocking=True)``.

With ``pin_memory=True`` the loader's pin thread puts each batch in pinned memory while
your step runs; ``non_blocking=True`` then starts the copy and returns at once. Workers
(``num_workers``) build the batches in other processes. Run: python examples/recipe_dataloader.py
"""

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset


def make_loader(
    dataset: Dataset, batch_size: int, device: str | torch.device, num_workers: int = 4
) -> DataLoader:
    """A loader that pins its batches when ``device`` is a GPU (nothing to pin on a CPU)."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=num_workers,
        pin_memory=torch.device(device).type == "cuda",
        persistent_workers=num_workers > 0,  # workers start once, not every epoch
    )


def to_device(batch, device: str | torch.device):
    """Each tensor of ``batch`` (a tensor, or a tuple or list of them) on ``device``, not blocking."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    return type(batch)(t.to(device, non_blocking=True) for t in batch)


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    images = torch.randn(256, 3, 224, 224)
    labels = torch.arange(256)
    loader = make_loader(TensorDataset(images, labels), batch_size=64, device=device, num_workers=2)
    for x, y in (to_device(b, device) for b in loader):
        assert torch.equal(x.cpu(), images[y.cpu()])  # each image arrived with its label
    print(f"one epoch of {len(loader)} batches on {device}, pinned: {loader.pin_memory}")


if __name__ == "__main__":
    main()
