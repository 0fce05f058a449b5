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
# # 03 · Spikes, explained
#
# `h2dlab.explain.outliers.detect()` flags a copy when it is much slower than its size should
# cost: many robust noise scales above the fitted line, and well over it in ratio. `explain()`
# then gives each flagged copy one cause, with evidence a person can check. Many causes concern
# pinned (page-locked) memory, which the GPU reads directly, and the allocators. The answer comes
# first: the few causes behind most slow copies. Every cause label, and the words the evidence
# uses, are explained at the end of this notebook.
#
# The line is fitted per run and strategy. Where it fits poorly, `h2dlab explain` marks the fit
# with `!` and says to trust the measured medians. There a slow copy can go unflagged and an
# ordinary one can look slow, so read the counts of those strategies with care.

# %% tags=["parameters"]
DATA = "h200"
MODE = "replay"

# %%
import pandas as pd
from IPython.display import Code, Markdown, display

from h2dlab import datasets, factors, forum_claims, outliers, plots, session
from h2dlab.findings import claims as findings
from h2dlab.escape import md_text
from h2dlab.findings import prose, spikes

rec = session.recording(DATA, mode=MODE)
tables = {"forum_a100": datasets.load("forum_a100"),
          **{kind: rec.table(kind) for kind in ("forum", "sweep", "allocator") if not rec.lacks(kind)}}
explained = {name: outliers.explain(t) for name, t in tables.items()}
rec.banner()

# %% [markdown]
# ## The answer: which causes explain most slow copies?
#
# Counted over this recording's `forum`, `sweep` and `allocator` tables, and apart from them
# over the forum's published A100 table. The causes are named by label; each label comes with a
# short gloss here and a full one at the end.

# %% tags=["hide-input"]
display(spikes.top_causes({n: e for n, e in explained.items() if n != "forum_a100"}, label="this recording's tables"),
        spikes.top_causes({n: e for n, e in explained.items() if n == "forum_a100"}, label="the forum's A100 table"))

# %% [markdown]
# ## 1 · What was flagged, and why?
#
# *How many copies were slow, and which cause does each get?* Flagged copies per table,
# strategy and cause. The A100 table is the forum's; the others are this recording's `forum`,
# `sweep` and `allocator` tables (`data/README.md` gives each run's date, build and schema).
#
# Strategies keep the tables' names. The forum protocol's are `pin_memory` (`x.pin_memory()`),
# `pinned_to_cuda` (the pinned copy) and `direct_to_cuda` (`x.to("cuda")`), each after
# `empty_cache()`; its runs are `ascending-1` and so on (sizes ascending) and `shuffled-1`. In
# the other tables `pageable` is `x.to("cuda")`, `pin_then_copy` is `x.pin_memory().to("cuda")`
# and `pinned_reuse` a copy from a pinned buffer made once; notebook 02 lists the rest.

# %% tags=["hide-input"]
display(prose.explain_commands(rec.name if rec.bundled else str(rec.folder), [k for k in ("batch", "d2h", "idle") if rec.has(k)]))
counts = pd.concat([outliers.summary(e).assign(table=name) for name, e in explained.items()])
counts.pivot_table(index=["table", "strategy"], columns="cause", values="rows", aggfunc="sum", fill_value=0)

# %% [markdown]
# ## 2 · Context start-up
#
# *Why is the first row of a process so slow?*

# %% tags=["hide-input"]
display(findings.context_startup(tables["forum"]) if "forum" in tables else rec.lacks("forum"))
ci = pd.concat([e[e.cause == "context_init"].assign(table=name) for name, e in explained.items()])
ci[["table", "strategy", "wall_ms", "event_ms", "expected_ms", "evidence"]].round(2)

# %% [markdown]
# ## 3 · Host allocator growth, tested against independent evidence
#
# *Is a slow `pin_memory()` really a new pinned block?* The label `host_alloc_growth` means the
# copy made a new pinned block. Giving it because the allocator's counter went up would be
# circular. The allocator runs time `x.pin_memory().to("cuda")` over the forum's grid (thinned by
# the recording plan), in ascending order. The host cache is kept (`warm`) or emptied before each
# size (`emptied`). A third run pins with `malloc` and `cudaHostRegister` instead of
# `cudaHostAlloc` (the setting `pinned_use_cuda_host_register`).
#
# Three checks do not use the counter. The allocator's stated rule predicts each new block from
# the sizes alone. The extra time is proportional to the new block's size. And where the table
# records page faults, the kernel mapped the block's pages during that copy. IQR below is the
# interquartile range: the middle half of the values.

# %% tags=["hide-input"]
growth_runs = ("allocator/pin-warm", "allocator/pin-emptied", "allocator/pin-register-emptied")
if not rec.lacks(*growth_runs):
    plots.allocator_growth(rec.table("allocator", "pin-warm"), strategy="pin_then_copy")
else:
    display(rec.lacks(*growth_runs))

# %% tags=["hide-input"]
if not rec.lacks(*growth_runs):
    warm_rows = rec.table("allocator", "pin-warm")  # copies whose block was cached: the baseline
    warm = findings.host_alloc_growth(warm_rows)
    emptied = findings.host_alloc_growth(rec.table("allocator", "pin-emptied"), emptied_each_size=True, reuse=warm_rows)
    reg = findings.host_alloc_growth(rec.table("allocator", "pin-register-emptied"), emptied_each_size=True, reuse=warm_rows)
    display(Markdown(f"**Host cache kept.** {warm}\n\n**Emptied before each size.** {emptied}\n\n"
                     f"**With `cudaHostRegister`, emptied.** {reg}"))
    display(Markdown(f"In the runs emptied before each size, a new block cost {emptied['ms_per_mib']['median']:.2f} ms per "
                     f"MiB through `cudaHostAlloc` and {reg['ms_per_mib']['median']:.2f} through `cudaHostRegister`; "
                     f"with the cache kept, {warm['ms_per_mib']['median']:.2f} (medians over the blocks each sentence "
                     "above counts). "
                     + ("" if warm["faults_per_page"]["n"] else "This recording has no page-fault counts (`minflt`), "
                        "so the third check waits for a recording that has them.")))

# %% [markdown]
# ## 4 · `empty_cache()`, then `cudaMalloc`
#
# *What does releasing the device cache before each copy cost?* The same pageable and pinned
# copies with the device cache kept and with `torch.cuda.empty_cache()` before each one:

# %% tags=["hide-input"]
kept, dropped = rec.get("allocator", "device-cache-kept"), rec.get("allocator", "device-empty-cache")
if kept is not None and dropped is not None:
    plots.cache_kept_vs_emptied(kept, dropped)
else:
    display(rec.lacks("allocator/device-cache-kept", "allocator/device-empty-cache"))

# %% tags=["hide-input"]
if kept is not None and dropped is not None:
    display(findings.device_alloc_cost(dropped, kept, strategy="pageable", baseline="pageable"))

# %% [markdown]
# ## 5 · Episodes: slow stretches in time
#
# *Which slow copies belong to a moment rather than to a size?* Change-point detection (PELT, a
# search that cuts a series where its level changes) finds stretches of slow copies in execution
# order. The forum's table has them; the shaded rows below are those stretches.
#
# The forum ran its sizes in ascending order, so there a stretch in time is also a band of
# sizes (notebook 01 says what that leaves open). A run that interleaves strategies, like this
# recording's batch runs, can show a stretch across strategies; `explain` names it an episode too.
#
# A third way needs no slow copies. Between two copies the kit's own loop does the same small
# work each time. Where that work took longer than elsewhere in the run, while the copies there
# ran slower and were flagged more often, the host itself ran slow (`h2dlab.explain.host_pace`).
# So a stretch is either one of slow copies or one of a slow host; each episode's evidence says
# which. In the tables below, `rows` counts every copy of the stretch and `flagged` those flagged
# slow. Only these are labelled `episode`.

# %% tags=["hide-input"]
ax = plots.timeline(explained["forum_a100"])
plots.annotate(explained["forum_a100"], ax=ax, max_labels=6);

# %% tags=["hide-input"]
display(forum_claims.episodes(explained["forum_a100"]),
        forum_claims.episodes(explained["forum"]) if "forum" in explained else rec.lacks("forum"))

# %% [markdown]
# ## 6 · What remains unexplained, and what was ruled out
#
# *What about the slow copies no cause fits?* h2dlab says *unexplained* rather than guess. Each
# such copy's evidence lists the causes the data rules out, and the checks its table could not
# make.

# %% tags=["hide-input"]
display(*(Markdown(f"**{md_text(name)}.** {factors.unexplained(e)}") for name, e in explained.items()))

# %% [markdown]
# One cause deserves a reader's doubt. `host_parallel` (time spent in a parallel CPU copy while
# PyTorch's worker threads ran) says *where* a copy's extra time went more than *why*. Busy
# workers are no reason: workers that spin look busy through any long copy.
#
# Newer tables also record how long each of the process's other threads waited to run. A worker
# that lost its CPU to another thread holds the parallel copy open. The sentence says so when one
# waited for at least half the extra time, longer than in any ordinary copy of its strategy. Even
# then it is a lead, not a proof: ordinary copies see such waits too. A virtual
# CPU (vCPU) that the machine's host took away does not show there at all. Every other
# `host_parallel` label is a place, not a reason. The sentences below count those copies as a
# skeptical reader would: as unexplained.

# %% tags=["hide-input"]
display(*(Markdown(f"**{md_text(name)}.** {factors.host_parallel(e)}") for name, e in explained.items() if (e.cause == "host_parallel").any()))

# %% [markdown]
# Check by check, for this recording's unexplained copies (`outliers.ruled_out`): one column per
# piece of evidence the table records, each cell quoting that copy's numbers. A blank cell is a
# check the table could not make for that copy. A recording without the scheduler columns
# (run-queue wait, context switches, time in the call) has none of those columns.
#
# Every CUDA run since the stall census was added (`h2dlab.measure.census`) gets a `stall census`
# column. It says how many stalls a spinning thread in that run's process met, how long the
# longest was, and why this copy's extra time is not one of them.

# %% tags=["hide-input"]
ruled = {name: outliers.ruled_out(explained[name]) for name in ("forum", "sweep", "allocator") if name in explained}
table = pd.concat(ruled).round(2) if ruled else rec.lacks("forum", "sweep", "allocator")
with pd.option_context("display.max_colwidth", None):  # each cell quotes its copy's numbers: show them whole
    display(table)

# %% [markdown]
# ## 7 · The first copy after a pause
#
# *Does a copy cost more when no copy ran for a while?* A small copy's time is mostly fixed
# costs, and one of them can depend on what came before. After a spell without copies a small
# copy can be slower. Some part likely wakes up: the GPU's copy engine, its PCIe link, the
# driver or the host (the tables cannot say which).
#
# The recording's `idle` runs measure this with the kit itself (`h2dlab measure --pause MS`).
# Before each timed copy the kit makes a tiny GPU submission and waits for it. Then it spins
# the CPU for the pause while the GPU has nothing to do, and times the copy by CUDA events.
#
# The submission does not remove the cost, so the gap that matters is the time since the
# previous copy ended. That is the pause plus the time the kit's own loop spends between
# copies (the finding gives it: a fraction of a millisecond), which differs from process to process. So compare the gaps the finding gives,
# not the pauses. Whether the host thread spun or slept in the gap is not recorded; a data
# loader's thread usually sleeps. Each pause ran in its own process, and processes differ. The
# same small copies after each pause:

# %% tags=["hide-input"]
display(Markdown(str(factors.idle_wake(rec.table("idle")))) if rec.has("idle") else rec.lacks("idle"))

# %% tags=["hide-input"]
plots.idle_pause(rec.table("idle"), name=f"{rec.name}:idle") if rec.has("idle") else None;

# %% [markdown]
# `explain` reads these runs when it judges a slow small copy in the same recording. It names
# one `gpu_wake` (likely a wake-up) only under two conditions. The copy began at least as long
# after the previous one as the copies of the shortest pause that shows the cost (their median
# gap). And its extra time is no more than those copies show.
#
# When the cost starts is this recording's answer, not necessarily your machine's: record your
# own (`h2dlab record --only idle`). The kit's own loop leaves some time between copies for its
# bookkeeping (the gaps above). So what a pause costs on your machine decides whether the kit's small-copy
# figures carry a wake-up. In your own code, a copy issued after the GPU has waited for the host
# (data loading, say) can pay it.

# %% [markdown]
# ## 8 · PyTorch's own waiting threads
#
# *Could PyTorch itself be behind the copies no cause fits?* OpenMP threads run PyTorch's CPU
# work. Between parallel regions they wait for the next one, by default spinning for a while
# before they sleep. The thread that starts a parallel region (here, the one timing the copy)
# waits for the others to finish it the same way. A thread that waits by spinning stays on its
# CPU, so in the table its wait looks like plain CPU work: no wait to run, no sleep.
#
# The bundled `h200_omp` recording shows it, whatever `DATA` this notebook reads. It is an H200
# of the same model as the bundled recording, on another VM build (`fc-v973`) and an earlier
# day (its env.json files give both). Its figures are the host's, not the link's. It ran one
# interleaved plan three times with the default policy and three times with
# `OMP_WAIT_POLICY=PASSIVE`, each run in its own process (`default-1`, `passive-1` and so on).
# Its env.json files store the policy; its tables read each other thread's own CPU clock:

# %% tags=["hide-input"]
display(Markdown(str(factors.openmp_wait(datasets.load("h200_omp")))))

# %% [markdown]
# To try it on your machine, run one plan twice, the second time with the variable set:
# `h2dlab measure --sizes 1KiB..64MiB --order interleaved --out a.csv`, then
# `OMP_WAIT_POLICY=PASSIVE h2dlab measure ... --out b.csv`. Then explain both:
# `h2dlab explain a.csv` and `h2dlab explain b.csv`. Both runs' env.json record the OpenMP
# settings they ran under.

# %% [markdown]
# ## 9 · Look at one slow copy yourself
#
# *What if the table cannot say more?* Trace the copy. `examples/trace_one_copy.py` records one
# pageable copy with `torch.profiler` and writes a trace that
# [Perfetto](https://ui.perfetto.dev) or `chrome://tracing` opens: the host's staging work and
# the copy engine's transfers on one time axis. It needs a CUDA GPU, so it is shown here, not run.

# %% tags=["hide-input"]
Code(filename="../examples/trace_one_copy.py", language="python")

# %% [markdown]
# ## The causes, and the words the evidence uses
#
# Each flagged copy gets the first cause whose evidence holds, tried in this order:
#
# | cause | what it means |
# | --- | --- |
# | `context_init` | the first timed operation of the process: CUDA starting up |
# | `host_alloc_growth` | a pinned request needed a new power-of-two block: `cudaHostAlloc`, or `cudaHostRegister` where the run pins that way |
# | `device_alloc` | the copy waited on more `cudaMalloc` than its neighbours, e.g. after `empty_cache()` |
# | `page_faults` | many more page faults than its neighbours, enough for the extra time. A minor fault maps a page in microseconds; a major one reads it from storage |
# | `host_preempted`, `host_blocked` | the timing thread waited for a CPU another task held, or slept (a lock, the kernel, another thread) |
# | `gc_pause`, `gpu_shared`, `gpu_clock_low` | Python's garbage collector ran; another process used the GPU; the GPU ran at a low clock |
# | `other_threads` | the process's other threads ran far more CPUs' worth than during copies of its size |
# | `host_parallel` | the extra time went into a parallel CPU copy (`pin_memory()`, `torch.cat`, `copy_` into pinned memory) while PyTorch's worker threads ran beside it. It places the time; it gives a reason only when a worker waited long to run |
# | `host_crowded` | PyTorch's worker threads took the CPUs: the timing thread waited to run, then ran while they did. Fewer intra-op threads (`torch.set_num_threads`) would leave it one |
# | `episode` | part of a stretch of slow copies in time order, or of a stretch in which the host itself ran slow (`h2dlab.explain.host_pace`) |
# | `gpu_wake` | a small copy a little slow after a spell without copies: likely some part waking up. Named only where the recording's idle runs show the cost on this machine |
# | `host_stall` | a copy a few tens of microseconds slow with every counter clean: likely the virtual machine's host took its CPU for a moment. Named only where the run has a stall census |
# | `unexplained` | none of the above; the evidence says what was ruled out |
#
# **Words the evidence uses.**
#
# - *Noise scale*: how far a strategy's copies usually fall from their fitted line, from the
#   median distance, so a few spikes do not inflate it.
# - *Its neighbours*: the other copies of the same run and strategy (*copies of this size*: of
#   the same size too). "Its neighbours: a share of their time" is the median share of their
#   time they spent in the timed call.
# - *CPUs' worth*: the CPU time the process's other threads ran during a copy, over the copy's
#   time. Two CPUs' worth is two threads busy throughout, on average.
# - *Run-queue wait*: time a thread was ready to run but had no CPU (the kernel's `schedstat`).
# - *vCPU*: a virtual machine's CPU. The machine's host can take it away for a moment, which the
#   guest cannot see: its thread looks as if it ran on.
# - *Stall census*: a second at the end of each run in which one thread spins on the clock and
#   counts the gaps it meets.
# - *PELT*: a change-point search that cuts a series where its level changes.
