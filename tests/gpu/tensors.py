"""Tensors for the GPU tests: seeded random ones of any dtype, and a bytewise comparison."""

import torch

__all__ = ["rand_tensor", "same_bytes"]


def rand_tensor(shape, dtype, seed=0):
    """A seeded random CPU tensor of ``shape`` and ``dtype`` (bool, complex, floating or integer)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=g)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-100 if dtype != torch.uint8 else 0, 100, shape, generator=g).to(dtype)


def same_bytes(a, b):
    """True when ``a`` and ``b`` have the same shape, dtype and bytes (compared on the CPU)."""
    a, b = a.cpu().contiguous(), b.cpu().contiguous()
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    )
