"""The bundled recordings by name: each one's folder under ``data/`` and what it holds.
``datasets.load(name)`` reads them; ``h2dlab datasets`` lists them."""

from __future__ import annotations

__all__ = ["DATASETS", "TIMELINES"]

#: name -> (folder under data/, one-line description)
DATASETS: dict[str, tuple[str, str]] = {
    "forum_a100": (
        "forum_a100",
        "the forum thread's published A100 table (210 sizes x 3 columns, host clock, one shot each)",
    ),
    "h200_forum": (
        "h200_forum",
        "the forum protocol re-run by `h2dlab forum` on an H200: 3 runs in size order, 1 shuffled",
    ),
    "h200_sweep": (
        "h200_sweep",
        "every strategy, 1 KiB - 4 GiB plus the forum's sizes, shuffled, repeated, on an H200",
    ),
    "h200x2_concurrent": (
        "h200x2_concurrent",
        "1 then 2 H200s copying at once on a 2-GPU host: pinned_reuse, pageable, staged, 64 MiB - 1 GiB",
    ),
    "h200_allocator": (
        "h200_allocator",
        "allocator experiments on an H200: host cache warm/emptied, cudaHostRegister conf, empty_cache",
    ),
    # kinds of the recording data/h200 (schema 2, made by `h2dlab record`) that the first
    # session's recording did not have
    "h200_d2h": (
        "h200/d2h",
        "device to host on an H200: four ways back (pageable, pinned buffer, non_blocking, staged)",
    ),
    "h200_bidir": (
        "h200/bidir",
        "both directions at once on an H200, beside each direction alone, 1 MiB - 1 GiB",
    ),
    "h200_batch": (
        "h200/batch",
        "a batch of 1-1024 tensors to an H200 by seven ways, equal and mixed sizes",
    ),
    "h200_omp": (
        "h200_omp",
        "one interleaved sweep on an H200, 3 runs with OpenMP's default wait policy, 3 with OMP_WAIT_POLICY=PASSIVE",
    ),
}


#: Recorded timelines (not measurement tables): name -> (folder, description)
TIMELINES: dict[str, tuple[str, str]] = {
    "h200_overlap": (
        "h200_overlap",
        "timelines of a 256 MiB copy beside bf16 matrix products on an H200 (one vs two streams, pinned vs pageable)",
    ),
}
