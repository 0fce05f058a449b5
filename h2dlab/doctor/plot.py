"""The copy lanes against the compute lanes of one traced step, exposed copy time marked."""

from __future__ import annotations

from typing import Any

import numpy as np

from h2dlab.doctor.intervals import merge, subtract
from h2dlab.escape import plot_text

__all__ = ["lanes"]

#: a copy's colour by its host memory (the kit's strategy colours: pageable red, pinned green)
COLORS = {"pageable": "#d62728", "pinned": "#2ca02c", "none": "#1f77b4"}
KERNEL = "#7f7f7f"


def lanes(dx: Any, ax: Any = None, step: int | None = None) -> Any:
    """Draw one step of a :class:`~h2dlab.doctor.Diagnosis`: a lane per GPU stream, kernels
    in grey, copies coloured by host memory, their exposed part hatched, and the GPU idle
    time that waits on copies as a band above.

    Parameters
    ----------
    dx
        What :func:`h2dlab.doctor.diagnose` returned.
    ax
        Axes to draw on (a new figure if None).
    step
        Which traced step (0-based); default the one with the most exposed copy time.

    Returns
    -------
    matplotlib.axes.Axes
    """
    from h2dlab.show.plots_style import SMALL_PT, axes_or_new

    ax = axes_or_new(ax)
    a = dx.analysis
    cp = a.copies[a.copies["step"] >= 0]
    if step is None:
        per = cp.groupby("step")["exposed_ms"].sum()
        step = int(per.idxmax()) if len(per) else 0
    if not 0 <= step < a.steps:
        raise ValueError(f"step must be 0..{a.steps - 1}, got {step}")
    c = cp[cp["step"] == step]
    lo, hi = a.step_windows[step]
    # the GPU side of a step runs late: from its first copy or launch to the next step's start
    gpu_lo = min(lo, float(c["ts"].min())) if len(c) else lo
    gpu_hi = max(hi, float(c["end"].max())) if len(c) else hi
    if step + 1 < len(a.step_windows):
        gpu_hi = max(gpu_hi, a.step_windows[step + 1][0])
    g = a.gpu[(a.gpu["end"] > gpu_lo) & (a.gpu["ts"] < gpu_hi)]
    streams = sorted({(int(d), int(s)) for d, s in zip(g["device"], g["stream"], strict=True)})
    row = {k: i for i, k in enumerate(streams)}
    t0 = gpu_lo
    k = g[g["cat"] != "gpu_memcpy"]
    for (d, s), kk in k.groupby(["device", "stream"]):
        ax.broken_barh(
            list(zip((kk["ts"] - t0) / 1e3, (kk["end"] - kk["ts"]) / 1e3, strict=True)),
            (row[(int(d), int(s))] - 0.35, 0.7),
            color=KERNEL,
            label="kernels" if row[(int(d), int(s))] == 0 else None,
        )
    kernels = a.gpu[a.gpu["cat"] == "kernel"]
    drawn: set[str] = set()
    for r in c.itertuples():
        y = row.get((int(r.device), int(r.stream)))
        if y is None:
            continue
        mem = r.host_memory if r.host_memory in COLORS else "none"
        lab = f"copy from/into {mem} memory" if mem not in drawn else None
        drawn.add(mem)
        ax.broken_barh(
            [((r.ts - t0) / 1e3, (r.end - r.ts) / 1e3)], (y - 0.35, 0.7), color=COLORS[mem], label=lab
        )
        other = kernels[(kernels["device"] == r.device) & (kernels["stream"] != r.stream)]
        u = merge(other["ts"].to_numpy(), other["end"].to_numpy())
        parts = subtract(float(r.ts), float(r.end), u)
        if parts:
            ax.broken_barh(
                [((p - t0) / 1e3, (q - p) / 1e3) for p, q in parts],
                (y - 0.45, 0.9),
                facecolor="none",
                edgecolor="black",
                hatch="///",
                label="exposed (no kernel beside it)" if "exposed" not in drawn else None,
            )
            drawn.add("exposed")
    ax.set_yticks(np.arange(len(streams)), [f"GPU {d} stream {s}" for d, s in streams])
    ax.set_ylim(-0.8, len(streams) - 0.2)
    ax.set_xlabel(f"ms since the start of traced step {step}")
    ax.set_title(
        f"Step {step}: copies add {float(c['exposed_ms'].sum() + c['idle_wait_ms'].sum()):.2f} ms "
        f"({float(c['exposed_ms'].sum()):.2f} exposed, {float(c['idle_wait_ms'].sum()):.2f} GPU idle waiting)"
    )
    ax.legend(loc="upper right", fontsize=SMALL_PT)
    ax.annotate(
        # a file name's "$" would start matplotlib's math text: escaped, the name shows as it is
        plot_text(f"trace: {a.path.rsplit('/', 1)[-1]}; step {step} of {a.steps}"),
        xy=(0, -0.28),
        xycoords="axes fraction",
        fontsize=SMALL_PT,
        color="0.35",
    )
    return ax
