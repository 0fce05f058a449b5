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
# # 02 · What is the fastest way to move a tensor to the GPU?
#
# Six ways to move a host tensor to the GPU, timed one copy at a time with CUDA events, every
# power of two from 1 KiB to 4 GiB, ten repetitions (three at 1 GiB and above), sizes in a
# seeded random order, warm-ups kept and labelled. The strategies, as `h2dlab.strategies`
# defines them:
#
# | strategy | what is timed |
# | --- | --- |
# | `pageable` | `x.to("cuda")` from ordinary memory: the driver stages it through its own pinned buffer |
# | `pageable_non_blocking` | `x.to("cuda", non_blocking=True)`, then synchronise: still staged |
# | `pin_then_copy` | `x.pin_memory().to("cuda")`: the forum's pattern, pinning included |
# | `pinned_reuse` | data already in a pinned buffer, copied into a preallocated device buffer |
# | `host_register` | pin the existing buffer in place (`cudaHostRegister`), copy, unregister |
# | `staged` | `h2dlab.transfer.to_device(x)`: threads copy chunks into a pinned ring while earlier chunks are in flight |

# %% tags=["parameters"]
MODE = "auto"

# %%
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display

from h2dlab import datasets, model, plots
from h2dlab.env import describe
from h2dlab.session import Session

S = Session(MODE)
sweep = S.data("h200_sweep")
pow2 = S.run("h200_sweep", "pow2")
S.banner()

# %% [markdown]
# ## Latency and bandwidth against size

# %%
fig, axs = plt.subplots(1, 2, figsize=(14, 5))
plots.latency(pow2, ax=axs[0])
axs[0].set_title("time per copy (median, IQR bars) and the fitted model")
plots.bandwidth(pow2, ax=axs[1])
axs[1].set_title("bandwidth: measured peak and the link's limit")
fig.tight_layout()

# %% [markdown]
# ## The fitted model: overhead and bandwidth per strategy
#
# `latency = overhead + bytes / bandwidth`, fitted robustly in log space (a 1 KiB copy counts
# as much as a 4 GiB one), with 95 % bootstrap intervals. `fit_err` is the median distance of
# the data from the straight model: a strategy whose speed changes with size shows it there.

# %%
fit = model.fit(pow2, by=("strategy",), n_boot=200).set_index("strategy")
med = model.medians(pow2)
peak = med[med.strategy == "pinned_reuse"]["gbps"].max()
at1g = med[med.size_bytes == 2**30].set_index("strategy")
table = pd.DataFrame({
    "overhead (µs)": fit.overhead_us.round(1),
    "overhead 95% CI": fit.overhead_us_lo.round(0).astype(int).astype(str) + "–"
    + fit.overhead_us_hi.round(0).astype(int).astype(str),
    "bandwidth (GB/s)": fit.gbps.round(2),
    "bandwidth 95% CI": fit.gbps_lo.round(1).astype(str) + "–" + fit.gbps_hi.round(1).astype(str),
    "fit_err": (100 * fit.median_abs_rel_err).round(0).astype(int).astype(str) + " %",
    "GB/s at 1 GiB (median)": at1g.gbps.round(2),
    "% of measured peak at 1 GiB": (100 * at1g.gbps / peak).round(0),
}).sort_values("GB/s at 1 GiB (median)", ascending=False)
display(table)
display(Markdown(
    f"The measured peak is **{peak:.1f} GB/s** (`pinned_reuse`). At 1 GiB, `x.to(\"cuda\")` from pageable memory "
    f"reaches **{at1g.loc['pageable', 'gbps']:.1f} GB/s** ({at1g.loc['pageable', 'gbps'] / peak:.0%} of the peak), "
    f"`x.pin_memory().to(\"cuda\")` **{at1g.loc['pin_then_copy', 'gbps']:.1f}**, pinning in place "
    f"**{at1g.loc['host_register', 'gbps']:.1f}**, and the staged copy **{at1g.loc['staged', 'gbps']:.1f} GB/s**, "
    f"{at1g.loc['staged', 'gbps'] / at1g.loc['pageable', 'gbps']:.1f}x `x.to(\"cuda\")`. "
    f"The smallest copies cost {fit.overhead_us.min():.0f}–{fit.overhead_us.max():.0f} µs whatever the strategy."))

# %% [markdown]
# ## Where the variability is
#
# Medians hide spread; `IQR / median` above 10 % is a warning that a single measurement
# could mislead (the convention of `torch.utils.benchmark`).

# %%
noisy = med[med.iqr_over_median > 0.10]
display(Markdown(
    f"{len(noisy)} of {len(med)} (strategy, size) cells have IQR/median above 10 %; by strategy: "
    + ", ".join(f"`{s}` {n}" for s, n in noisy.groupby('strategy').size().items()) + "."))

# %% [markdown]
# ## The staged copy against PyTorch's own ways, in one run
#
# `benchmarks/bench_transfer.py` measured `to_device` beside `x.to("cuda")`, pin-then-copy
# (also with `pinned_use_cuda_host_register`), TensorDict's multithreaded pinning, and the
# pinned ceiling, in one process, with the host's own ceiling for any staged path: a
# multithreaded `memcpy` from pageable into pinned memory on all cores.

# %%
bench = datasets.load_benchmark("h200")
b = pd.DataFrame(bench["rows"])
piv = b.pivot(index="size_bytes", columns="method", values="gbps_median")
fig, ax = plt.subplots(figsize=(9, 4.6))
for m in piv.columns:
    ax.plot(piv.index, piv[m], "o-", ms=3, label=m)
for k, v in bench["ceilings"].items():
    if k.startswith("host_copy"):
        ax.axhline(v, ls=":", lw=0.8, color="k")
        ax.annotate(f"host memcpy ceiling ({k.split('_')[2]}): {v:.0f} GB/s", (piv.index.min(), v), fontsize=7,
                    xytext=(0, 3), textcoords="offset points")
plots.size_axis(ax)
ax.set_ylabel("GB/s (median)")
ax.legend(fontsize=8)
ax.grid(alpha=0.3)
ax.text(0, -0.16, f"data: benchmarks/results/h200.json · {describe(bench['env'])}", transform=ax.transAxes,
        fontsize=7, color="#555")
plt.show()
ratios = b[b.method == "to_device"].set_index("size_bytes")["ratio_vs_to"]
big = ratios[ratios.index >= 2**28]
display(Markdown(
    f"From 256 MiB to 4 GiB `to_device` ran at {piv.loc[piv.index >= 2**28, 'to_device'].min():.1f}–"
    f"{piv.loc[piv.index >= 2**28, 'to_device'].max():.1f} GB/s, {big.min():.1f}–{big.max():.1f}x `x.to(\"cuda\")` in "
    f"the same run; below its 32 MiB threshold it calls `x.to()` itself (ratios "
    f"{ratios[ratios.index < 2**25].min():.2f}–{ratios[ratios.index < 2**25].max():.2f}, the noise of two "
    f"identical calls). TensorDict's `non_blocking_pin` reached {piv.loc[piv.index >= 2**28, 'tensordict'].max():.1f} GB/s. "
    f"The multithreaded host copy alone measured {bench['ceilings']['host_copy_1GiB_gbps']:.0f} GB/s at 1 GiB and "
    f"{bench['ceilings']['host_copy_4GiB_gbps']:.0f} GB/s at 4 GiB, against the pinned peak of "
    f"{bench['ceilings']['pinned_reuse_peak_gbps']:.0f} GB/s: on this host the memory copy, not PCIe, is the wall."))

# %% [markdown]
# ## The answer: a decision table
#
# `h2dlab.model.advise()` reads the measured medians (interpolated between measured sizes)
# and picks the fastest strategy for each common case. *Upfront* is what the case pays once
# before its first copy (registering the buffer); the one-off case uses the cold
# `pin_memory()` cost measured with the host cache emptied.

# %%
advice = pd.concat([model.advise(n, df=pow2) for n in (2**20, 2**26, 2**30)], ignore_index=True)
show = advice.assign(size=advice.size_bytes.map(plots.size_label))[
    ["size", "case", "best", "best_ms", "best_gbps", "runner_up", "speedup_vs_pageable", "upfront_ms"]].round(3)
display(show)
one = advice[(advice.case.str.startswith("one-off")) & (advice.size_bytes == 2**30)].iloc[0]
rep = advice[(advice.case.str.startswith("the same")) & (advice.size_bytes == 2**30)].iloc[0]
display(Markdown(
    f"**For 1 GiB in ordinary memory, copied once:** `{one.best}` ({one.best_ms:.0f} ms, "
    f"{one.speedup_vs_pageable:.1f}x `x.to(\"cuda\")`). **Copied again and again:** pin it once in place "
    f"(`h2dlab.transfer.pinned`, {rep.upfront_ms:.0f} ms up front, measured as `host_register` minus "
    f"`pinned_reuse`) and every copy then takes {rep.best_ms:.1f} ms. **Already pinned** (a DataLoader with "
    f"`pin_memory=True`): copy with `non_blocking=True`, and overlap it with compute (04). "
    f"**Small tensors** (1 MiB here): the strategies are within "
    f"{advice[advice.size_bytes == 2**20].speedup_vs_pageable.max():.1f}x of each other; batch them instead."))

# %% [markdown]
# ## Several GPUs at once
#
# Feeding two GPUs from one host, the copies compete for host memory bandwidth and, if the
# GPUs share a switch, for PCIe lanes. `h2dlab measure --gpus 1..2` runs one process per GPU
# (each pinned to the CPUs nearest its GPU where NVML says), starting every size together
# behind a barrier. Recorded on a 2-GPU H200 host (32 cores).

# %%
conc = datasets.load("h200x2_concurrent")
fig, ax = plt.subplots(figsize=(8, 4.4))
plots.concurrency(conc, ax=ax)
ax.set_title("aggregate and per-GPU bandwidth at 1 GiB")
plt.show()
cc = model.concurrency(conc)
c1g = cc[(cc.size_bytes == 2**30) & (cc.world == 2)].set_index("strategy")
display(cc[cc.size_bytes == 2**30].round(2))
display(Markdown(
    f"With two GPUs copying 1 GiB at once: pinned copies reached **{c1g.loc['pinned_reuse', 'aggregate_gbps']:.0f} GB/s** "
    f"together ({c1g.loc['pinned_reuse', 'scaling']:.2f}x one GPU): no shared bottleneck for pinned DMA on this host. Pageable copies "
    f"{c1g.loc['pageable', 'aggregate_gbps']:.1f} GB/s ({c1g.loc['pageable', 'scaling']:.2f}x). The staged copy fell from "
    f"{c1g.loc['staged', 'single_gpu_gbps']:.1f} GB/s on one GPU to {c1g.loc['staged', 'per_gpu_gbps']:.1f} per GPU "
    f"({c1g.loc['staged', 'aggregate_gbps']:.1f} together, {c1g.loc['staged', 'scaling']:.2f}x), as expected if its "
    f"host-side memory copies share the host's memory bandwidth."))
