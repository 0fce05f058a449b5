"""A synthetic ``workload`` table (named synthetic wherever it appears): seeded step times
around chosen medians, in the schema, for the findings tests. Not a measurement."""

import numpy as np
import pandas as pd

from h2dlab.measure.workload import WAYS
from h2dlab.recording import datasets

#: Chosen medians (ms) per way: invented for tests, shaped like the issue's description.
SYNTHETIC_MS = {
    "resident": 4.5, "pageable_to": 11.5, "pin_memory_each_step": 16.0, "pinned_buffer": 8.0,
    "loader_pageable": 12.0, "loader_pinned": 5.1, "loader_prefetch": 4.8, "many_loop_to": 13.0,
    "many_pin_each": 20.0, "many_packed": 8.5, "results_cpu": 4.7, "results_pinned": 4.6,
}  # fmt: skip


def synthetic_workload(
    medians: dict[str, float] | None = None, steps: int = 21, seed: int = 0
) -> pd.DataFrame:
    """Rows for each way in ``medians``: ``steps`` timed steps whose median is exactly the
    chosen one (odd ``steps``: the middle value is placed), spread +-2 %, plus 2 warm-ups."""
    medians = SYNTHETIC_MS if medians is None else medians
    rng = np.random.default_rng(seed)
    rows, order = [], 0
    for way, ms in medians.items():
        d2h = way.startswith("results_")
        half = np.sort(rng.uniform(0.001, 0.02, steps // 2))
        values = np.concatenate([ms * (1 - half), [ms], ms * (1 + half)])
        rng.shuffle(values)
        for warm, vals in ((True, [ms * 3, ms * 2]), (False, values)):
            for rep, v in enumerate(vals):
                rows.append(dict(run_id="synthetic", order=order, strategy=way, shape="64x3x224x224",
                                 dtype="float32", size_bytes=262144 if d2h else 38535168, rep=rep, warmup=warm,
                                 t_s=order * 0.01, wall_ms=float(v), event_ms=float(v), host_allocs=0.0,
                                 device_allocs=0.0, empty_cache=False, error="", direction="d2h" if d2h else "h2d",
                                 n_tensors=64 if way.startswith("many_") else 1))  # fmt: skip
                order += 1
    df = datasets.validate(pd.DataFrame(rows), source="synthetic")
    df.attrs["dataset"] = "synthetic"
    env = {
        "gpu_name": "synthetic GPU",
        "date": "2026-12-03",
        "spec": {"kind": "workload", "shape": [64, 3, 224, 224], "matmuls": 11},
    }
    df.attrs["envs"] = {"synthetic": env}
    return df


assert set(SYNTHETIC_MS) == set(WAYS)
