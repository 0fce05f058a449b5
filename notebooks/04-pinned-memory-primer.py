# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation
#   kernelspec:
#     display_name: h2dlab (Python)
#     language: python
#     name: h2dlab
# ---

# %% [markdown]
# # 04 · Pinned memory, a primer with measurements
#
# A teaching notebook: each idea is stated, then shown with a figure from the recording named
# in the banner.
#
# **Pageable and pinned (page-locked) memory.** Ordinary host memory is *pageable*: the operating system may
# move or swap its pages, so a device cannot be handed its physical address. *Pinned*
# (page-locked) memory stays put. So the GPU's copy engines can read it directly over PCIe (the
# host's PCI Express link to the GPU) by DMA (direct memory access), without the CPU.

# %% tags=["parameters"]
DATA = "h200"
MODE = "replay"

# %%
from IPython.display import Markdown, display

from h2dlab import advice, factors, findings_tutorial, plots, session
from h2dlab.findings import stability

rec = session.recording(DATA, mode=MODE)
sweep = rec.get("sweep", "pow2-interleaved")
cold = rec.get("allocator", "pin-emptied")
tl = rec.get("overlap")
rec.banner()

# %% [markdown]
# ## 1 · A pinned copy is a DMA; a pageable copy is staged
#
# From pageable memory, `x.to("cuda")` makes the driver copy the data, a piece at a time, into
# a small pinned staging buffer of its own and DMA each piece from there: a CPU copy and a
# transfer, one after the other. From pinned memory the DMA reads the tensor itself. *How much
# does that matter, for large copies and for small ones?* The pinned rate belongs to the link
# and hardly moves between recordings; the pageable rate belongs to the host and moves (the
# section on what pinning costs gives its range).

# %% tags=["hide-input"]
plots.bandwidth(sweep, strategies=["pageable", "pinned_reuse"]) if sweep is not None else display(rec.lacks("sweep/pow2-interleaved"));

# %% tags=["hide-input"]
if sweep is not None:
    display(advice.memory_kind(sweep, 2**30), advice.memory_kind(sweep, 2**16))

# %% [markdown]
# ## 2 · What `non_blocking=True` does
#
# `copy_(src, non_blocking=True)` only *queues* the copy on a CUDA stream and returns, and that
# is possible only when the source is pinned. From pageable memory the driver must stage the
# data with the CPU, so the call returns when the staging is done, that is, about when the copy
# is. Work on one CUDA stream runs in order; work on two streams may run at once. *Can a copy
# hide behind compute?* The timelines come from `h2dlab overlap`: a copy and a batch of matrix
# products that do not depend on it, bracketed by CUDA events; the tick marks when the Python
# call that launched each operation returned.

# %% tags=["hide-input"]
plots.overlap(tl, env=rec.env("overlap", "overlap"), name=rec.name) if tl is not None and sweep is not None else display(rec.lacks("overlap", "sweep/pow2-interleaved"));

# %% tags=["hide-input"]
ov = factors.overlap(tl) if tl is not None and sweep is not None else None
if ov is not None:
    display(ov, factors.non_blocking_pageable(sweep))

# %% [markdown]
# ## 3 · When `non_blocking=True` is unsafe
#
# *When must you wait?* Between the return of a non-blocking copy and its end on the GPU, the
# data is in flight:
#
# - **host → device:** do not modify (or free) the pinned source until the copy has finished,
#   or the GPU may read the new bytes;
# - **device → host:** do not read the pinned destination on the CPU before synchronising
#   (`torch.cuda.synchronize()`, `event.synchronize()` or `stream.synchronize()`): it may not
#   hold the data yet;
# - **across streams:** the consumer on another stream must `wait_stream` / `wait_event`.

# %% tags=["hide-input"]
if ov is not None:
    display(Markdown(f"In the timeline above the window lasted {ov['in_flight_ms']['min']:.1f}–"
                     f"{ov['in_flight_ms']['max']:.1f} ms per copy. `h2dlab.transfer.fastpath.to_device(..., non_blocking=True)` "
                     "differs on purpose: it returns once every byte has left the pageable source for its own pinned "
                     "ring, so the source may change at once."))

# %% [markdown]
# ## 4 · What pinning costs
#
# `x.pin_memory()` asks PyTorch's caching host allocator for a pinned block; when none of the
# request's power-of-two class is free it makes one (`cudaHostAlloc`) and then copies the
# tensor into it. `cudaHostRegister` pins an existing buffer in place. *When does pinning first
# pay, at the same size?* What pinning costs belongs to the host, and it moves between
# recordings of one machine model; the last sentence gives its range.

# %% tags=["hide-input"]
plots.pin_cost(sweep, cold=cold, register=rec.get("allocator", "pin-register-emptied")) if sweep is not None and cold is not None else display(rec.lacks("sweep/pow2-interleaved", "allocator/pin-emptied"));

# %% tags=["hide-input"]
if sweep is not None and cold is not None:
    display(advice.pin_first_pays(advice.advice(sweep, 2**28, cold=cold)), advice.registering_cost(sweep))
    display(stability.for_recording(rec))

# %% [markdown]
# ## 5 · Pinned memory is a limited resource
#
# Pinned pages cannot be paged out, so every pinned byte is a byte the operating system cannot
# reclaim; pin too much and the machine, or a container's memory limit, runs out. PyTorch's host
# cache keeps freed pinned blocks for reuse, so its pinned footprint only grows until the
# cache is emptied. *What did this machine allow?*

# %% tags=["hide-input"]
display(factors.machine(rec.env("sweep", "pow2-interleaved"), failed_rows=int((sweep.error != "").sum()))
        if sweep is not None else rec.lacks("sweep/pow2-interleaved"))

# %% [markdown]
# ## 6 · The advice
#
# *Which way, then?* The same table as in notebooks 01 and 02 (the README sums it up).

# %% tags=["hide-input"]
extra = {kind: rec.table(kind, run) for kind, run in (("d2h", "d2h"), ("batch", "equal")) if rec.has(kind, run)}
adv = advice.advice(sweep, 2**30, cold=cold, **extra) if sweep is not None else None
plots.advice_bars(adv, name=rec.name, source=sweep) if adv is not None else display(rec.lacks("sweep/pow2-interleaved"));

# %% tags=["hide-input"]
if adv is not None:
    display(adv[["case", "what", "code", "per_copy_ms", "q1_ms", "q3_ms", "gbps", "upfront_ms", "verdict", "basis"]].round(2))
    display(advice.best_way(adv), advice.best_way(adv, copies=100))

# %% [markdown]
# ## 7 · Where does this agree with PyTorch's tutorial?
#
# *Do these measurements agree with PyTorch's own guide?* The tutorial "A guide on good usage of
# `non_blocking` and `pin_memory()` in PyTorch" makes two timing claims: pinning first is usually
# slower, and for many small tensors a loop of `non_blocking=True` copies beats blocking ones.
# Each is checked here against this recording.

# %% tags=["hide-input"]
display(findings_tutorial.tutorial(sweep, rec.get("batch", "equal"), rec.get("workload")) if sweep is not None else rec.lacks("sweep/pow2-interleaved"))
