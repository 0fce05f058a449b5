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
# # 01 · The forum experiment, revisited
#
# A PyTorch user timed three things on an A100, once per tensor size, sizes in ascending order.
# The tables name them by column: `pin_memory` is `x.pin_memory()`, a copy into pinned
# (page-locked) memory; `pinned_to_cuda` is the pinned copy to the GPU; `direct_to_cuda` is
# `x.to("cuda")` from ordinary (pageable) memory. Between steps the script called
# `torch.cuda.empty_cache()`. The user asked: *is my experiment set up correctly, and what
# factors am I missing?* And: *why is a tensor of shape `(24, 2, 1, 1026, 4096)` faster to copy
# than `(24, 2, 1, 966, 4096)`?*
#
# This notebook puts the published table beside the same protocol re-run with `h2dlab forum`.
# The re-run's runs are named by their order: `ascending-1` and the like keep the forum's
# ascending sizes, `shuffled-1` shuffles them. Each ran in a fresh process, with CUDA events and
# allocator counters beside the host clock. The factors follow one at a time. The banner names
# the machine and date of the re-run; every number in the prose is computed below.

# %% tags=["parameters"]
DATA = "h200"
MODE = "replay"

# %%
from IPython.display import Code, Markdown, display

from h2dlab import advice, datasets, factors, forum_claims, outliers, plots, session
from h2dlab.findings import claims as findings
from h2dlab.findings import stability

rec = session.recording(DATA, mode=MODE)
forum, a100 = rec.get("forum"), datasets.load("forum_a100")
sweep, reuse = rec.get("sweep", "pow2-interleaved"), rec.get("sweep", "forum-sizes")
cold = rec.get("allocator", "pin-emptied")
ea, ef = outliers.explain(a100), outliers.explain(forum) if forum is not None else None
rec.banner()

# %% [markdown]
# ## The answer first: the forum's script, corrected
#
# Start CUDA before timing; one untimed warm-up copy per cell; repeat every size and shuffle
# the order; buffers made once and no `empty_cache()` in the timed loop; CUDA events beside
# the host clock; print the median and quartiles. It ships as `examples/forum_corrected.py`
# (run it with `python` on a CUDA machine). The sections below show why each change matters.

# %% tags=["hide-input"]
Code(filename="../examples/forum_corrected.py", language="python")

# %% [markdown]
# ## 1 · The two tables side by side
#
# *Do the published table and the re-run show the same thing?* Each point is one timed step.
# The forum's pinned column includes more than the copy, so the link is estimated with that
# part taken out.

# %% tags=["hide-input"]
if rec.has("forum", "ascending-1") and reuse is not None:
    fig, axs = plots.subplots(1, 2, sharey=True)
    plots.forum_columns(a100, ax=axs[0])
    plots.forum_columns(rec.table("forum", "ascending-1"), ax=axs[1])
    axs[0].set_title("published A100 table: host clock, one shot per size")
    axs[1].set_title("re-run: CUDA events, size order")
else:
    display(rec.lacks("forum/ascending-1", "sweep/forum-sizes"))

# %% tags=["hide-input"]
if forum is not None and reuse is not None:
    display(forum_claims.link_estimate(a100, forum, reuse))

# %% [markdown]
# ## 2 · The first operation starts CUDA
#
# *Why does the very first row take so long?* It is the first CUDA call of the process, which
# creates the context. CUDA events, recorded once the context exists, tell the two apart.

# %% tags=["hide-input"]
display(Markdown(f"**A100 table.** {findings.context_startup(a100)}\n\n"
                 + (f"**Re-run.** {findings.context_startup(forum)}" if forum is not None else rec.lacks("forum"))))

# %% [markdown]
# ## 3 · Pinning, and a host allocator that grows in powers of two
#
# *Why does `pin_memory()` spike at some sizes and not at others?* The rule, from PyTorch's
# `aten/src/ATen/core/CachingHostAllocator.h`, and the re-run's counter (`num_host_alloc`) beside
# it. IQR in the sentences below is the interquartile range: the middle half of the values.

# %% tags=["hide-input"]
display(Markdown(findings.ALLOCATOR_RULE + "."))

# %% tags=["hide-input"]
if forum is not None:
    plots.allocator_growth(forum, strategy="pin_memory")

# %% tags=["hide-input"]
if forum is not None:
    growth = findings.host_alloc_growth(forum)
    shuffled = growth.table[growth.table.run == "shuffled-1"].size_mib
    display(Markdown(f"**Re-run.** {growth} In the shuffled run new blocks came at requests of "
                     f"{', '.join(f'{m:.2f}' for m in shuffled)} MiB."))
else:
    display(rec.lacks("forum"))
display(Markdown(f"**A100 table.** {findings.host_alloc_growth(a100)}"))

# %% [markdown]
# ## 4 · `empty_cache()` inside the loop
#
# *What does releasing the device cache before every step cost?* Each pinned copy then needs a
# fresh device allocation (`cudaMalloc`). The baseline is the sweep's `pinned_reuse` strategy,
# at the sizes both runs measured: copies from a pinned buffer made once into a reused device
# buffer.

# %% tags=["hide-input"]
plots.device_alloc_cost(forum, reuse) if forum is not None and reuse is not None else display(rec.lacks("forum", "sweep/forum-sizes"));

# %% tags=["hide-input"]
if forum is not None and reuse is not None:
    display(findings.device_alloc_cost(forum, reuse), Markdown(findings.EMPTY_CACHE_NOTE + "."))

# %% [markdown]
# ## 5 · One shot per size
#
# *Can one measurement per size be trusted?* The sweep's `forum-sizes` run repeated part of the
# forum's sizes (the recording plan thins the grid). How far does the slowest repetition stray
# from its size's median, and from the fastest? Here `pageable` is `x.to("cuda")`; notebook 02
# lists every strategy of the sweep.

# %% tags=["hide-input"]
display(forum_claims.single_shot_spread(reuse) if reuse is not None else rec.lacks("sweep/forum-sizes"))

# %% [markdown]
# ## 6 · Sizes in ascending order make time look like size
#
# *Are the A100's slow stretches a property of those sizes?* With sizes in ascending order,
# anything that drifts in time shows up as a range of sizes. h2dlab looks for stretches of slow
# copies in execution order (change points) and calls them *episodes*.

# %% tags=["hide-input"]
ax = plots.timeline(ea)
plots.annotate(ea, ax=ax, max_labels=4);

# %% tags=["hide-input"]
display(Markdown(f"**A100 table.** {forum_claims.episodes(ea)} {forum_claims.slow_stretch(ea)}"))
display(Markdown(f"**Re-run.** {forum_claims.episodes(ef)}") if ef is not None else rec.lacks("forum"))

# %% [markdown]
# ## 7 · Host clock versus CUDA events
#
# *Which clock did you use, and does it matter?* `time.perf_counter()` around a synchronised
# copy counts the launch and the synchronisation; CUDA events count what happened on the GPU's
# queue between two marks, and on an idle GPU that includes host work.

# %% tags=["hide-input"]
display(findings.clocks(forum) if forum is not None else rec.lacks("forum"))

# %% [markdown]
# ## 8 · The machine
#
# *What about the machine itself?* Pinned memory is a limited resource. A host buffer may sit on
# a NUMA (non-uniform memory access) node far from the GPU. An idle GPU lowers its clocks. What
# the recording says:

# %% tags=["hide-input"]
if sweep is not None:
    display(factors.machine(rec.env("sweep", "pow2-interleaved"), failed_rows=int((sweep.error != "").sum())))
    display(factors.gpu_clocks(forum if forum is not None else sweep))  # the forum's runs read the clock
else:
    display(rec.lacks("sweep/pow2-interleaved"))

# %% [markdown]
# ## 9 · Why is 1026 faster than 966?
#
# *The forum's second question.* The two rows in the A100 table, and the same two sizes in every
# re-run, against the ratio of their sizes:

# %% tags=["hide-input"]
display(forum_claims.size_pair(ea, forum) if forum is not None else rec.lacks("forum"))

# %% [markdown]
# ## What to do instead: one advice table
#
# The same table as in notebooks 02 and 04 (the README sums it up), from the sweep (interleaved
# order). Its first call of `pin_memory()` is every copy that made a new pinned block. Those come
# from the sweep and from the run with the host cache emptied before each size. *Basis* says how
# many copies a figure rests on. PyTorch's pin_memory tutorial warns that `x.pin_memory().to()`
# can be slower than `x.to()`: here is when, on this recording.

# %% tags=["hide-input"]
extra = {kind: rec.table(kind, run) for kind, run in (("d2h", "d2h"), ("batch", "equal")) if rec.has(kind, run)}
adv = advice.advice(sweep, 2**30, cold=cold, **extra) if sweep is not None else None
plots.advice_bars(adv, name=rec.name, source=sweep) if adv is not None else display(rec.lacks("sweep/pow2-interleaved"));

# %% tags=["hide-input"]
if adv is not None:
    display(adv[["case", "what", "code", "per_copy_ms", "q1_ms", "q3_ms", "gbps", "upfront_ms", "verdict", "basis"]].round(2))
    display(advice.pin_first_pays(adv), advice.best_way(adv), advice.best_way(adv, copies=100))

# %% [markdown]
# A pinned copy's rate belongs to the link and hardly moves between recordings of one machine
# model. A pageable copy's rate and what pinning costs belong to the host, and they move. Each
# host-side figure, as its range across the recordings of this GPU model that the kit holds:

# %% tags=["hide-input"]
display(stability.for_recording(rec))
