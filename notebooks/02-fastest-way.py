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
# power of two from a kibibyte to several gibibytes, repeated, warm-ups kept and labelled. The
# sizes run in *interleaved* order: each repetition visits every size and every strategy in
# turn, so a slow moment of the machine cannot pose as a property of one strategy or size.
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
DATA = "h200"
MODE = "replay"

# %%
from IPython.display import Markdown, display

from h2dlab import advice, datasets, factors, plots, session

rec = session.recording(DATA, mode=MODE)
sweep = rec.table("sweep", "pow2-interleaved")
cold = rec.table("allocator", "pin-emptied")
rec.banner()

# %% [markdown]
# ## 1 · How fast is each way, from the smallest copy to the largest?

# %% tags=["hide-input"]
plots.bandwidth(sweep);

# %% tags=["hide-input"]
display(advice.bandwidth(sweep))

# %% [markdown]
# ## 2 · What does a small copy cost?
#
# *Does the strategy matter when the copy is tiny?* Time per copy on log axes, with the fitted
# `overhead + bytes / bandwidth` model dashed.

# %% tags=["hide-input"]
plots.latency(sweep);

# %% tags=["hide-input"]
display(advice.small_copy_floor(sweep), advice.memory_kind(sweep, 2**16), advice.memory_kind(sweep, 2**20))

# %% [markdown]
# ## 3 · Does pinning first pay?
#
# PyTorch's pin_memory/non_blocking tutorial says `x.pin_memory().to("cuda")` can be slower than
# `x.to("cuda")`. Whether it is depends on one thing: does the caching host allocator already
# hold a free pinned block of the request's power-of-two class? The figure puts the first call
# (a new block) beside calls whose block was cached, against plain pageable and pinned copies.

# %% tags=["hide-input"]
plots.pin_cost(sweep, cold=cold, register=rec.table("allocator", "pin-register-emptied"));

# %% tags=["hide-input"]
display(advice.pin_first_pays(advice.advice(sweep, 2**26, cold=cold)), advice.registering_cost(sweep))

# %% [markdown]
# ## 4 · The staged copy against PyTorch's own ways, in one run
#
# *Does staging through a pinned ring beat what PyTorch offers, and what bounds it?*
# `benchmarks/bench_transfer.py` timed `to_device` beside `x.to("cuda")`, pin-then-copy (also
# with `pinned_use_cuda_host_register`), TensorDict's multithreaded pinning and reused pinned
# buffers, in one process, with a multithreaded host `memcpy` from pageable into pinned memory
# measured alone. Its result is bundled for the H200 only (the figure's footnote names it).

# %% tags=["hide-input"]
bench = datasets.load_benchmark("h200")
plots.benchmark(bench);

# %% tags=["hide-input"]
display(advice.host_copy_ceiling(bench))

# %% [markdown]
# ## 5 · The answer: one advice table
#
# *So which way should you use?* The same table as in notebooks 01 and 04 and the README. *Per copy* is the median with its
# quartiles; *up front* is what a way pays once before its first copy (pinning in place); the
# first call of `pin_memory()` comes from runs with the host cache emptied before each size.

# %% tags=["hide-input"]
adv = advice.advice(sweep, 2**30, cold=cold)
plots.advice_bars(adv, name=DATA);

# %% tags=["hide-input"]
display(adv[["what", "code", "per_copy_ms", "q1_ms", "q3_ms", "gbps", "upfront_ms", "verdict"]].round(2))
display(advice.best_way(adv), advice.best_way(adv, copies=100), advice.pin_first_pays(adv))

# %% [markdown]
# ## 6 · Many small tensors, and the way back
#
# *What about a batch of many tensors, and results coming back to the host?* A training step
# moves many tensors at once, and results, logits or checkpoints come back.

# %% tags=["hide-input"]
display(Markdown("This recording has batches of many tensors." if rec.has("batch") else
                 "This recording has no batch of many small tensors, so this notebook does not advise on them."))
display(Markdown("This recording has device-to-host copies." if rec.has("d2h") else
                 "This recording has no device-to-host copies, so the advice covers host to device only."))

# %% [markdown]
# ## 7 · Several GPUs at once
#
# *Do several GPUs fed from one host slow each other down?* Feeding several GPUs from one host, the copies compete for host memory bandwidth and, if the
# GPUs share a switch, for PCIe lanes. `h2dlab measure --gpus 1..2` runs one process per GPU,
# starting every size together behind a barrier.

# %% tags=["hide-input"]
if rec.has("concurrent"):
    plots.concurrency(rec.table("concurrent"))

# %% tags=["hide-input"]
display(factors.concurrency(rec.table("concurrent")) if rec.has("concurrent") else
        Markdown("This recording has no run of several GPUs at once."))
