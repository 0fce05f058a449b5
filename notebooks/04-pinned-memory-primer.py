# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Pinned memory, a primer with measurements
#
# A teaching notebook: each idea is stated, then shown with a figure from real data (recorded
# on an H200, or measured on your GPU in live mode).
#
# **Pageable and pinned memory.** Ordinary host memory is *pageable*: the operating system may
# move or swap its pages, so a device cannot be handed its physical address. *Pinned*
# (page-locked) memory stays put, so the GPU's copy engines can read it directly over PCIe by
# DMA, without the CPU.

# %% tags=["parameters"]
MODE = "auto"

# %%
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display

from h2dlab import datasets, model, plots
from h2dlab.session import Session

S = Session(MODE)
pow2 = S.run("h200_sweep", "pow2")
tl = S.data("h200_overlap")
alloc = S.data("h200_allocator")
S.banner()

# %% [markdown]
# ## 1 · A pinned copy is a DMA; a pageable copy is staged
#
# From pageable memory, `x.to("cuda")` makes the driver copy the data, a piece at a time,
# into a small pinned staging buffer of its own and DMA each piece from there: a CPU copy
# and a transfer, one after the other. From pinned memory the DMA reads the tensor itself.

# %%
ax = plots.bandwidth(pow2, strategies=["pageable", "pinned_reuse"])
ax.set_title("the same copy from pageable and from pinned memory")
plt.show()
med = model.medians(pow2).set_index(["strategy", "size_bytes"])["gbps"]
display(Markdown(
    f"At 1 GiB: pageable **{med['pageable', 2**30]:.1f} GB/s**, pinned **{med['pinned_reuse', 2**30]:.1f} GB/s** "
    f"({med['pinned_reuse', 2**30] / med['pageable', 2**30]:.1f}x). At 64 KiB the two are "
    f"{med['pageable', 2**16]:.2f} and {med['pinned_reuse', 2**16]:.2f} GB/s: small copies are bound by the "
    f"per-copy overhead, not by the memory kind."))

# %% [markdown]
# ## 2 · What `non_blocking=True` does
#
# `copy_(src, non_blocking=True)` only *queues* the copy on a CUDA stream and returns. That
# is possible only when the source is pinned. From pageable memory the driver must stage the
# data with the CPU, so the call returns when the staging is done, that is, about when the
# copy is.
#
# The timelines below come from `h2dlab overlap`: a 256 MiB copy and a batch of bf16 matrix
# products that do not depend on it, bracketed by CUDA events. The black tick marks when the
# Python call that launched each operation returned.

# %%
env = tl.attrs.get("env") or {}
fig, ax = plt.subplots(figsize=(11, 3.8))
plots.overlap(tl, ax=ax, env=env, name="h200_overlap")
ax.set_title("copy (blue) and compute (orange): one stream, two streams, pinned vs pageable source")
plt.show()
last = tl[tl.rep == tl.rep.max()].set_index(["scenario", "op"])
end = tl.groupby(["scenario", "rep"])["end_ms"].max().groupby("scenario").median()
display(Markdown(
    f"With a pinned source, the copy call returned after **{last.loc[('overlap_pinned', 'copy'), 'host_return_ms']:.2f} ms** "
    f"while the copy itself ran until {last.loc[('overlap_pinned', 'copy'), 'end_ms']:.1f} ms. With a pageable source "
    f"and the same `non_blocking=True`, the call returned only after "
    f"**{last.loc[('overlap_pageable', 'copy'), 'host_return_ms']:.1f} ms**, when the copy was over "
    f"({last.loc[('overlap_pageable', 'copy'), 'end_ms']:.1f} ms)."))

# %% [markdown]
# ## 3 · Overlapping a copy with compute
#
# Work on one CUDA stream runs in order; work on two streams may run at once, if nothing
# orders it. So: issue the copy on a side stream from pinned memory, run independent compute
# on the default stream, and make the consumer wait for the copy (`wait_stream`) only where
# it needs the data.

# %%
display(pd.DataFrame({"median end of the last operation (ms)": end.round(2)}))
display(Markdown(
    f"One stream: **{end['serial_pinned']:.1f} ms** (copy, then compute). Two streams, pinned source: "
    f"**{end['overlap_pinned']:.1f} ms**, {end['serial_pinned'] / end['overlap_pinned']:.2f}x faster: the copy "
    f"hides behind the compute. Two streams, pageable source: **{end['overlap_pageable']:.1f} ms**: the host was "
    f"blocked in the copy call, so the compute was launched only after it."))

# %% [markdown]
# ## 4 · When `non_blocking=True` is unsafe
#
# Between the return of a non-blocking copy and its end on the GPU, the data is in flight:
#
# - **host → device:** do not modify (or free) the pinned source until the copy has finished,
#   or the GPU may read the new bytes;
# - **device → host:** do not read the pinned destination on the CPU before synchronising
#   (`torch.cuda.synchronize()`, `event.synchronize()` or `stream.synchronize()`): it may not
#   hold the data yet;
# - **across streams:** the consumer on another stream must `wait_stream` / `wait_event`.
#
# The window is not small: in the timeline above it was the gap between the tick and the end
# of the blue bar.

# %%
w = tl[(tl.scenario == "overlap_pinned") & (tl.op == "copy")]
win = w.end_ms - w.host_return_ms
display(Markdown(
    f"Over {len(w)} repetitions, a pinned 256 MiB copy was still in flight **{win.min():.1f}–{win.max():.1f} ms** "
    f"after its call returned: that long, the source must stay untouched and the result unread. "
    f"(`h2dlab.transfer.to_device(..., non_blocking=True)` is different on purpose: it returns once every byte "
    f"has been copied out of the pageable source into its own pinned ring, so the source may change at once.)"))

# %% [markdown]
# ## 5 · What pinning costs
#
# Pinning is not free. `x.pin_memory()` allocates a new pinned block (PyTorch's caching host
# allocator calls `cudaHostAlloc` when no cached block of the right power-of-two size is
# free) and copies the tensor into it; `cudaHostRegister` pins an existing buffer in place.

# %%
cold = S.run("h200_allocator", "pin-emptied").query("rep == 0")
reg = S.run("h200_allocator", "pin-register-emptied").query("rep == 0")
warm = S.run("h200_allocator", "pin-warm").query("rep > 0")
fig, ax = plt.subplots(figsize=(9, 4.4))
for d, lab in ((cold, "pin_memory() + copy, cold (cudaHostAlloc)"),
               (reg, "the same with pinned_use_cuda_host_register"),
               (warm, "pin_memory() + copy, block cached")):
    ax.plot(d.size_bytes, d.size_bytes / d.event_ms / 1e6, ".", ms=4, label=lab)
p = model.medians(pow2)
for s in ("pageable", "pinned_reuse"):
    g = p[(p.strategy == s) & p.size_bytes.between(cold.size_bytes.min(), cold.size_bytes.max())]
    ax.plot(g.size_bytes, g.gbps, "-", color=plots.PALETTE[s], label=f"{s} (sweep median)")
plots.size_axis(ax)
ax.set_ylabel("effective GB/s of pinning + copy")
ax.legend(fontsize=7)
ax.grid(alpha=0.3)
plots.footnote(ax, alloc)
plt.show()
gbps_big = {k: (d[d.size_bytes >= 2**28].size_bytes / d[d.size_bytes >= 2**28].event_ms / 1e6).median()
            for k, d in (("cold", cold), ("reg", reg), ("warm", warm))}
bench = datasets.load_benchmark("h200")
display(Markdown(
    f"Above 256 MiB: a cold `pin_memory()` + copy ran at **{gbps_big['cold']:.1f} GB/s**, with "
    f"`pinned_use_cuda_host_register` **{gbps_big['reg']:.1f} GB/s**, and with the block already cached "
    f"**{gbps_big['warm']:.1f} GB/s**, against {med['pageable', 2**28]:.1f} GB/s for a plain pageable copy of 256 MiB. "
    f"Registering 1 GiB in place took **{bench['ceilings']['host_register_1GiB_ms']:.0f} ms** "
    f"(`benchmarks/results/h200.json`). **Pin once and reuse; do not pin to copy once.**"))
