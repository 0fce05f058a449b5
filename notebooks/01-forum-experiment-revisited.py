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
# # 01 · The forum experiment, revisited
#
# A PyTorch user timed three things on an A100 for 210 tensor sizes and asked two questions:
# *is my experiment set up correctly, and what factors am I missing?* and *why is a tensor of
# shape (24, 2, 1, 1026, 4096) faster to copy than (24, 2, 1, 966, 4096)?*
#
# This notebook puts the published table beside the same protocol re-run with h2dlab on an
# H200 (`h2dlab forum`: three runs in the forum's size order and one shuffled, each in a fresh
# process, with CUDA events and allocator counters beside the host clock), and shows, one
# factor at a time, what the original experiment could not see. Every number below is computed
# from the data in this notebook; the banner says which data.

# %% tags=["parameters"]
MODE = "auto"  # "auto": measure live if this machine has CUDA, else replay; or "replay" / "live"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from h2dlab import datasets, model, outliers, plots
from h2dlab.session import Session
from h2dlab.units import forum_shape

S = Session(MODE)
a100 = datasets.load("forum_a100")
h200 = S.data("h200_forum")
alloc = S.data("h200_allocator")
sweep = S.data("h200_sweep")
ea = outliers.explain(a100)
eh = outliers.explain(h200)
h_asc = S.run("h200_forum", "ascending-1")
S.banner()

# %% [markdown]
# ## The two tables side by side
#
# Each point is one timed step. The A100 column shapes are the forum's; the H200 points are
# the first of our three size-ordered runs, timed with CUDA events.

# %%
fig, axs = plt.subplots(1, 2, figsize=(13, 4.6), sharey=True)
plots.forum_columns(a100, ax=axs[0])
axs[0].set_title("published: A100, host clock, one shot per size")
plots.forum_columns(h_asc, ax=axs[1])
axs[1].set_title("re-run: H200, CUDA events, one shot per size")
fig.tight_layout()

# %%
w = a100.pivot(index="order", columns="strategy", values="wall_ms")
hm = model.fit(h_asc, by=("strategy",), n_boot=0).set_index("strategy")
am = model.fit(a100, by=("strategy",), n_boot=0).set_index("strategy")
display(Markdown(
    f"Fitted with a robust `overhead + bytes / bandwidth` model, pinned → GPU runs at "
    f"**{am.loc['pinned_to_cuda', 'gbps']:.1f} GB/s** in the A100 table and **{hm.loc['pinned_to_cuda', 'gbps']:.1f} GB/s** "
    f"on the H200; the direct copy from pageable memory at **{am.loc['direct_to_cuda', 'gbps']:.1f}** and "
    f"**{hm.loc['direct_to_cuda', 'gbps']:.1f} GB/s**. Both tables show the same shape: pinned copies are faster "
    f"than pageable ones, and `pin_memory()` itself, at {am.loc['pin_memory', 'gbps']:.1f} and "
    f"{hm.loc['pin_memory', 'gbps']:.1f} GB/s, costs {am.loc['pinned_to_cuda', 'gbps'] / am.loc['pin_memory', 'gbps']:.1f}x "
    f"and {hm.loc['pinned_to_cuda', 'gbps'] / hm.loc['pin_memory', 'gbps']:.1f}x as much as the pinned copy it prepares."))

# %% [markdown]
# ## Factor 1 · The first operation starts CUDA
#
# The forum's first row took over a second. Nothing about that size is slow: it is the
# first CUDA call of the process, which creates the context. With CUDA events beside the host
# clock the two can be told apart: the events start only once the context exists.

# %%
first = h200[h200["order"] == h200.groupby("run_id")["order"].transform("min")]
first = first.assign(run=first.run_id.map(h200.attrs["run_names"]))
tbl = first[["run", "strategy", "size_bytes", "wall_ms", "event_ms"]].copy()
tbl["startup_ms"] = tbl.wall_ms - tbl.event_ms
tbl = tbl.round(2)
display(tbl)
display(Markdown(
    f"A100: the first `pin_memory()` took **{w.loc[0, 'pin_memory']:.0f} ms** against "
    f"{w.loc[3, 'pin_memory']:.2f} ms three rows later. H200: the first operation took "
    f"{tbl.wall_ms.min():.0f}–{tbl.wall_ms.max():.0f} ms by the host clock, of which "
    f"{tbl.startup_ms.min():.0f}–{tbl.startup_ms.max():.0f} ms passed before the GPU saw it. "
    f"**Warm up (or time with events) before you measure.**"))

# %% [markdown]
# ## Factor 2 · Pinning costs, and the host allocator grows in powers of two
#
# `x.pin_memory()` asks PyTorch's caching host allocator for a pinned block. It rounds every
# request up to a power of two, keeps freed blocks in a free list per size, and calls the
# slow `cudaHostAlloc` only when no cached block of that size is free
# (`aten/src/ATen/core/CachingHostAllocator.h`; it never splits a larger block). In the
# forum's loop each pinned tensor is freed before the next size, so a new block is needed
# exactly when the size first crosses a power of two. The H200 runs record the allocator's
# `num_host_alloc` counter per row:

# %%
ax = plots.allocator_growth(h200, strategy="pin_memory")
ax.set_title("pin_memory(): slow exactly when a new pinned block is allocated (4 H200 runs)")
plt.show()
pm = eh[(eh.strategy == "pin_memory") & eh.is_outlier & (eh.cause != "context_init")]
g = pm[pm.cause == "host_alloc_growth"]
other = pm[pm.cause != "host_alloc_growth"]
grew = eh[(eh.strategy == "pin_memory") & (eh.host_allocs > 0) & (eh.size_bytes >= 16 * 2**20)]
ga = ea[(ea.strategy == "pin_memory") & (ea.cause == "host_alloc_growth")].sort_values("order")
spike_mib = sorted({round(s / 2**20, 2) for s in g.size_bytes})
display(Markdown(
    f"On the H200, **{len(g)} of the {len(pm)} flagged `pin_memory()` rows** after the first coincide with "
    f"`num_host_alloc` going up, in {g.run_id.nunique()} runs, at requests of {', '.join(map(str, spike_mib))} MiB, "
    f"each just past a power of two; every such growth at 16 MiB or more was flagged "
    f"({grew.is_outlier.sum()} of {len(grew)}). The other {len(other)} flagged rows are milder "
    f"(median {(other.event_ms / other.expected_ms).median():.1f}x the expected time) and made no new block. "
    f"In the A100 table, which has no counters, the same rule applied to the "
    f"sizes and their order predicts growth at rows {', '.join(map(str, ga.order))}: exactly the rows that "
    f"spiked (e.g. row {ga.order.iloc[-1]}: {ga.wall_ms.iloc[-1]:.1f} ms)."))

# %% [markdown]
# ## Factor 3 · `empty_cache()` inside the loop
#
# The forum called `torch.cuda.empty_cache()` before every direct copy. That hands the
# device memory back to the driver, so the next copy's output must be allocated with
# `cudaMalloc` again. The allocator experiment ran the same pageable copies with and without
# it:

# %%
dev = pd.concat([S.run("h200_allocator", "device-cache-kept").assign(empty_cache_each_copy=False),
                 S.run("h200_allocator", "device-empty-cache").assign(empty_cache_each_copy=True)])
dev = dev[(dev.strategy == "pageable") & ~dev.warmup]
cmp_ = dev.groupby(["size_bytes", "empty_cache_each_copy"]).agg(
    median_ms=("event_ms", "median"), new_segments=("device_allocs", "mean")).unstack()
cmp_ = cmp_[cmp_.index >= 2**20]
fig, ax = plt.subplots(figsize=(8, 4))
ax.plot(cmp_.index, cmp_[("median_ms", True)] / cmp_[("median_ms", False)], "o-")
plots.size_axis(ax)
ax.axhline(1, color="k", lw=0.8)
ax.set_ylabel("time with empty_cache() / without")
ax.set_title("pageable copy: the cost of releasing the device cache before each copy")
plots.footnote(ax, alloc)
plt.show()
r = cmp_[("median_ms", True)] / cmp_[("median_ms", False)]
iso = ea[ea.is_outlier & (ea.cause == "unexplained") & (ea.strategy != "pin_memory")]
display(Markdown(
    f"With `empty_cache()` before each copy, every copy needed "
    f"{cmp_[('new_segments', True)].min():.0f}–{cmp_[('new_segments', True)].max():.0f} new device segment(s) "
    f"(`cudaMalloc`) against {cmp_[('new_segments', False)].max():.0f} without, and took "
    f"{r.min():.2f}–{r.max():.2f}x as long (median over sizes {r.median():.2f}x). A steady cost in every row, "
    f"far from the {(iso.wall_ms / iso.expected_ms).median():.0f}x (median) of the A100 table's isolated, unexplained "
    f"spikes."))

# %% [markdown]
# ## Factor 4 · One shot per size
#
# The forum timed each size once. With ten repetitions per size (the `forum-sizes` run of
# the H200 sweep: pageable and pinned copies over the same 210 sizes), we can see how far a
# single shot strays from the typical copy of its size.

# %%
fs = S.run("h200_sweep", "forum-sizes")
fs = fs[~fs.warmup]
spread = fs.groupby(["strategy", "size_bytes"])["event_ms"].agg(["median", "min", "max"])
spread["max_over_median"] = spread["max"] / spread["median"]
spread["min_over_median"] = spread["min"] / spread["median"]
summary = spread.groupby("strategy")[["min_over_median", "max_over_median"]].describe(
    percentiles=[0.5, 0.9])[[("min_over_median", "min"), ("max_over_median", "50%"), ("max_over_median", "90%"),
                             ("max_over_median", "max")]]
display(summary.round(2))
display(Markdown(
    f"For `pageable` copies the slowest of a size's repetitions is typically "
    f"{summary.loc['pageable', ('max_over_median', '50%')]:.2f}x its median and up to "
    f"{summary.loc['pageable', ('max_over_median', 'max')]:.1f}x; pinned copies are steadier "
    f"(typically {summary.loc['pinned_reuse', ('max_over_median', '50%')]:.2f}x). **One shot per size cannot tell a slow "
    f"size from a slow moment: repeat, and report medians with their spread.**"))

# %% [markdown]
# ## Factor 5 · Sizes in ascending order make time look like size
#
# The forum measured sizes in ascending order, so anything that drifts over time (another
# process, a clock, the OS) shows up as a feature of some range of sizes. h2dlab looks
# for such stretches in execution order with a change-point method and calls them
# *episodes*. In the A100 table:

# %%
fig, axs = plt.subplots(1, 2, figsize=(13, 4.4))
for ax, s in zip(axs, ["pinned_to_cuda", "direct_to_cuda"], strict=True):
    plots.timeline(ea, strategy=s, ax=ax)
    plots.annotate(ea[ea.strategy == s], ax=ax, max_labels=3)
    ax.set_title(f"A100 {s}: execution order = size order")
fig.tight_layout()
eps = ea[ea.episode >= 0].groupby(["strategy", "episode"])["order"].agg(["min", "max", "size"])
display(eps)

# %% [markdown]
# The re-run on the H200 shuffled the sizes once: a time effect then scatters across sizes
# instead of forming a ramp. None of the H200 runs showed the forum's decaying stretches.

# %%
sh = S.run("h200_forum", "shuffled-1")
esh = outliers.explain(sh)
fig, ax = plt.subplots(figsize=(9, 4))
plots.forum_columns(sh, ax=ax)
ax.set_title("H200, sizes in shuffled order: time effects would scatter, not ramp")
plt.show()
eps_txt = ", ".join(f"{s} rows {lo}–{hi}" for (s, _), lo, hi in zip(eps.index, eps["min"], eps["max"], strict=True))
display(Markdown(
    f"Episodes found in the four H200 runs: **{eh[eh.episode >= 0].episode.nunique()}**; "
    f"in the A100 table: **{ea[ea.episode >= 0].episode.nunique()}** "
    f"({eps_txt})."))

# %% [markdown]
# ## Factor 6 · Pageable memory is staged by the driver
#
# A copy from ordinary (pageable) memory cannot be a direct DMA: the driver copies it, piece
# by piece, into a pinned staging buffer of its own and transfers from there. That is why
# the forum's direct copy is slower than the pinned one, and why pinning first does not pay
# for a single copy.

# %%
ratio = (h_asc.pivot(index="size_bytes", columns="strategy", values="event_ms"))
ratio = ratio.assign(pin_plus_copy=ratio.pin_memory + ratio.pinned_to_cuda)
big = ratio[ratio.index >= 2**27]
cold = S.run("h200_allocator", "pin-emptied").query("rep == 0 and size_bytes >= 2**27")
display(Markdown(
    f"On the H200 above 128 MiB: direct copy median **{(big.index / big.direct_to_cuda / 1e6).median():.1f} GB/s**, "
    f"pinned copy **{(big.index / big.pinned_to_cuda / 1e6).median():.1f} GB/s**, but `pin_memory()` + copy "
    f"**{(big.index / big.pin_plus_copy / 1e6).median():.1f} GB/s**. Pinning a tensor to copy it once gains "
    f"{(big.direct_to_cuda / big.pin_plus_copy).median():.2f}x here, where the host cache already holds a block of "
    f"the right size. With the host cache emptied first, `pin_memory()` + copy ran at "
    f"**{(cold.size_bytes / cold.event_ms / 1e6).median():.1f} GB/s** (`pin-emptied` run, first copy of each size "
    f"above 128 MiB). Notebook 02 measures the alternatives."))

# %% [markdown]
# ## Factor 7 · Host clock versus CUDA events
#
# `time.perf_counter()` around a synchronised copy counts the launch, the synchronisation and
# anything the host did in between; CUDA events count the GPU's part only.

# %%
d = h200[h200["order"] > h200.groupby("run_id")["order"].transform("min")]
gap = (d.wall_ms - d.event_ms) * 1000
rel = (d.wall_ms / d.event_ms - 1)
display(Markdown(
    f"Over {len(d)} H200 steps (first rows excluded) the host clock read a median **{gap.median():.0f} µs** more "
    f"than the events ({np.percentile(gap, 90):.0f} µs at the 90th percentile): "
    f"{(rel > 0.05).mean():.0%} of steps differ by over 5 %, and {(d[rel > 0.05].size_bytes < 4 * 2**20).mean():.0%} "
    f"of those are copies under 4 MiB. For copies of a few MiB and up "
    f"the two agree; for small copies, or for anything that includes host work such as `pin_memory()`, "
    f"say which clock you used."))

# %% [markdown]
# ## Factor 8 · The machine
#
# PCIe generation and width bound every pinned copy. The A100's host is not in the post;
# the H200 here reports its link through NVML.

# %%
env = datasets.run_env(h200)
lim = plots.pcie_limit_gbps(env)
peak = model.medians(sweep).query("strategy == 'pinned_reuse'")["gbps"].max()
display(Markdown(
    f"H200 link: **PCIe Gen{env.get('pcie_gen_max')} x{env.get('pcie_width_max')}**, {lim:.0f} GB/s on paper; "
    f"the best pinned copy measured **{peak:.1f} GB/s** ({peak / lim:.0%}). The A100 table's pinned copies fit "
    f"{am.loc['pinned_to_cuda', 'gbps']:.1f} GB/s, which suggests a Gen4 x16 link (31.5 GB/s on paper) or a busy one; "
    f"the post does not say. Compare machines only with their fingerprints."))

# %% [markdown]
# ## Why is 1026 faster than 966?

# %%
s966, s1026 = (int(np.prod(forum_shape(q))) * 2 for q in (966, 1026))
r966 = ea[(ea.size_bytes == s966)].set_index("strategy")
r1026 = ea[(ea.size_bytes == s1026)].set_index("strategy")
hh = h200.groupby(["strategy", "size_bytes"])["event_ms"].median().unstack()
display(pd.DataFrame({
    "A100 966 (ms)": r966.wall_ms, "A100 966 expected": r966.expected_ms.round(2), "episode": r966.episode,
    "A100 1026 (ms)": r1026.wall_ms, "H200 966 median of 4 runs": hh[s966].round(2),
    "H200 1026 median of 4 runs": hh[s1026].round(2)}))
display(Markdown(
    f"It is not. Row 193 (seq 966) lies inside the stretch of slow copies that began at row 180 and decayed until "
    f"row {eps.loc['direct_to_cuda', 'max'].max()}: its direct copy took {r966.loc['direct_to_cuda', 'wall_ms']:.1f} ms where the "
    f"model of the rest of the table expects {r966.loc['direct_to_cuda', 'expected_ms']:.1f} ms. By row 205 (seq 1026) the "
    f"episode was over. A time effect, read as a size effect because the sizes were swept in order. On the H200, "
    f"over four runs, the larger tensor takes {hh.loc['pinned_to_cuda', s1026] / hh.loc['pinned_to_cuda', s966]:.2f}x "
    f"as long as the smaller when pinned (the size ratio is {s1026 / s966:.2f})."))

# %% [markdown]
# ## What a correct experiment looks like
#
# Warm up CUDA first; repeat each size and report medians and spread; shuffle the order; keep
# `empty_cache()` out of the timed loop unless it is what you study; time with CUDA events
# (and say so); pin once and reuse, or use a staged copy (02); record the machine. That is
# what `h2dlab measure` does.
