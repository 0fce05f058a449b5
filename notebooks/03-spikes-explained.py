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
# `h2dlab.explain.outliers.detect()` flags a copy when it is much slower than its size should cost
# (many robust noise scales above the fitted expectation, and well over it in ratio).
# `explain()` then gives each flagged copy one cause, with evidence a person can check:
#
# | cause | what it means |
# | --- | --- |
# | `context_init` | the first timed operation of the process: CUDA starting up |
# | `host_alloc_growth` | a pinned request needed a new power-of-two block: `cudaHostAlloc` (or `cudaHostRegister`, where the run pins that way) |
# | `device_alloc` | the copy waited on more `cudaMalloc` than its neighbours (after `empty_cache()`) |
# | `page_faults` | many more page faults than its neighbours, enough to account for the extra time (a minor fault maps a page in microseconds; a major fault reads one from storage, and the sentence names it) |
# | `host_preempted`, `host_blocked`, `gc_pause`, `gpu_shared`, `gpu_clock_low` | where the table records CPU time, the scheduler's run-queue wait and context switches, garbage collections and the GPU's state |
# | `other_threads` | the process's other threads ran far more CPUs' worth during the copy than during copies of its size (tables that read each thread's own CPU clock name the busiest; older ones cannot say which) |
# | `host_parallel` | the extra time went into the timed host call, the timing thread on its CPU throughout, while PyTorch's worker threads ran (or spun) beside it, the busiest on a CPU nearly the whole copy (a fixed bar: copies just under it stay `unexplained`): a parallel CPU copy (`pin_memory()`, `torch.cat`, `copy_` into pinned memory) waits for its slowest worker (tables that read each thread's own CPU clock only). Busy workers are no reason (spinning workers look busy through any long copy): the sentence says the label places the time, not its reason, unless (in tables that record it) one worker waited to run for at least half the extra time, longer than any ordinary copy's workers did: consistent with a worker that lost its CPU to another thread |
# | `host_crowded` | the timed host call ran long; the timing thread waited to run for part of the extra and spent the rest on its CPU while PyTorch's worker threads ran beside it, the busiest nearly the whole copy: consistent with the workers taking the CPUs; fewer intra-op threads (`torch.set_num_threads`) would leave it one (tables that read each thread's own CPU clock only) |
# | `episode` | part of a stretch of slow copies in time order, found by change-point detection, or a stretch in which the host itself ran slow: the kit's own loop took longer between copies than before copies of the same strategy and size elsewhere in the run, while the copies there ran slower and were flagged more often (`h2dlab.explain.host_pace`) |
# | `gpu_wake` | a small copy a little slow after a spell without copies (the copy after a long gap, sometimes the next one too), consistent with some part waking up (the GPU's copy engine, its PCIe link, the driver or the host: not shown which); named only where idle runs recorded beside the table (`h2dlab measure --pause`) show after how long a spell, and at what cost, on this machine (likely, not certain: only the gap points to it) |
# | `host_stall` | a copy a few tens of microseconds slow, on its CPU the whole time with every counter clean, its extra time within the sizes of the stalls a thread spinning in the run's own process met: each CUDA run ends with a one-second stall census (`h2dlab.measure.census`) that counts how often, and for how long, a spinning thread loses time with its CPU clock running on (time taken from a running vCPU where the guest cannot see it); named only where the run has a census (likely, not certain: only the size of the extra points to it) |
# | `unexplained` | none of the above; the evidence says what was ruled out |
#
# **Words the evidence uses.** *Noise scale*: how far a strategy's copies usually fall from
# their fitted line, measured robustly (from the median distance, so a few spikes do not
# inflate it); a copy is flagged when it lies many noise scales above the line and well above
# it in ratio. *Its neighbours*: the other copies of the same run and strategy (*copies of
# this size*: of the same size too); "its neighbours: a share of their time" is the median
# share of their time they spent in the timed call. *CPUs' worth*: the CPU time the process's
# other threads ran during a copy over the copy's time, so two CPUs' worth is two threads
# busy throughout on average. *Run-queue wait*: time a thread was ready to run but had no CPU
# (the kernel's `schedstat`). *vCPU*: a virtual machine's CPU; the machine's host can take it
# away for a moment, which the guest cannot see: its thread looks as if it ran on. *Stall
# census*: a second at the end of each run in which one thread spins on the clock and counts
# the gaps it meets. *PELT*: a change-point search that cuts a series where its level changes.
#
# The line is fitted per run and strategy. Where it fits poorly (`h2dlab explain` marks such a
# fit with `!` and says to trust the measured medians), a slow copy can go unflagged and an
# ordinary one can look slow, so read the counts of those strategies with care.

# %% tags=["parameters"]
DATA = "h200"
MODE = "replay"

# %%
import pandas as pd
from IPython.display import Code, Markdown, display

from h2dlab import datasets, factors, forum_claims, outliers, plots, session
from h2dlab.findings import claims as findings

rec = session.recording(DATA, mode=MODE)
tables = {"forum_a100": datasets.load("forum_a100"),
          **{kind: rec.table(kind) for kind in ("forum", "sweep", "allocator") if not rec.lacks(kind)}}
explained = {name: outliers.explain(t) for name, t in tables.items()}
rec.banner()

# %% [markdown]
# ## 1 · What was flagged, and why?
#
# *How many copies were slow, and which cause does each get?* Flagged copies per table,
# strategy and cause (the A100 table is the forum's; the others are this recording's `forum`,
# `sweep` and `allocator` tables: `data/README.md` gives each run's date, build and schema).
# Its other kinds have flagged copies too: `h2dlab explain h200:batch`, `h200:d2h`,
# `h200:idle`):

# %% tags=["hide-input"]
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
# *Is a slow `pin_memory()` really a new pinned block?* Flagging a copy as `host_alloc_growth`
# because the allocator's counter went up would be circular. The allocator runs time
# `x.pin_memory().to("cuda")` over the forum's grid (thinned by the recording plan), in
# ascending order, with the host cache kept (`warm`) or
# emptied before each size (`emptied`), and again with `pinned_use_cuda_host_register`, which
# pins with `malloc` and `cudaHostRegister` instead of `cudaHostAlloc`. Three checks that do not
# use the flag: the allocator's stated rule predicts each new block from the sizes alone; the
# extra time is proportional to the new block's size; and, where the table records page faults,
# the kernel mapped the block's pages during that copy.

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
# *Which slow copies belong to a moment rather than to a size?* Change-point detection (PELT)
# finds stretches of slow copies in execution order. The forum's table has them; the shaded
# rows below are those stretches. The forum ran its sizes in ascending order, so there a
# stretch in time is also a band of sizes (notebook 01 says what that leaves open); a run
# that interleaves strategies, like this recording's batch runs, can show a stretch across
# strategies, which `explain` names an episode too. A third way needs no slow copies to find
# it: between two copies the kit's own loop does the same small work each time, so a stretch
# in which that work took longer than before copies of the same strategy and size elsewhere,
# while the copies there ran slower and were flagged more often, is a stretch in which the
# host itself ran slow (`h2dlab.explain.host_pace`). So there are two kinds of stretch: one of slow
# copies (found within one strategy, or across strategies) and one of a slow host. Each
# episode's evidence gives its span and figures and says which kind it is. In the tables
# below, `rows` counts every copy of the stretch and `flagged` those flagged slow: only these
# are labelled `episode` (a copy inside a stretch that was not slow enough gets no label).

# %% tags=["hide-input"]
ax = plots.timeline(explained["forum_a100"])
plots.annotate(explained["forum_a100"], ax=ax, max_labels=6);

# %% tags=["hide-input"]
display(forum_claims.episodes(explained["forum_a100"]),
        forum_claims.episodes(explained["forum"]) if "forum" in explained else rec.lacks("forum"))

# %% [markdown]
# ## 6 · What remains unexplained, and what was ruled out
#
# *What about the slow copies no cause fits?* h2dlab says *unexplained* rather than guess, and
# each such copy's evidence lists the causes the data rules out, and the checks its table
# could not make.

# %% tags=["hide-input"]
display(*(Markdown(f"**{name}.** {factors.unexplained(e)}") for name, e in explained.items()))

# %% [markdown]
# One cause deserves a reader's doubt: `host_parallel` says *where* a copy's extra time went
# (into the host-side parallel copy, the timing thread on its CPU throughout) more than *why*.
# Busy workers are no reason: workers that spin look busy through any long copy. Newer tables
# also record how long each of the process's other threads waited to run during the copy; a
# worker that lost its CPU to another thread holds the parallel copy open, and the sentence
# says so when one waited for at least half the extra time, longer than any ordinary copy
# of its strategy saw (waits of a few milliseconds come with ordinary copies too, so even
# then it is "consistent with", not proven). A vCPU that the VM's host took away does
# not show there at all. Every other `host_parallel` label is a place, not a reason, and the
# sentences below count those copies as a skeptical reader would: as unexplained.

# %% tags=["hide-input"]
display(*(Markdown(f"**{name}.** {factors.host_parallel(e)}") for name, e in explained.items() if (e.cause == "host_parallel").any()))

# %% [markdown]
# Check by check, for this recording's unexplained copies (`outliers.ruled_out`): one column
# per piece of evidence the table records, each cell quoting that copy's numbers. A blank
# cell is a check the table could not make for that copy; a recording without the scheduler
# columns (run-queue wait, context switches, time in the call) has none of those columns.
# A run recorded with a stall census (`h2dlab.measure.census`, every CUDA run since the census was
# added) gets a `stall census` column: how many stalls a thread spinning in that run's own
# process met with its CPU clock running on, how long the longest was, and why this copy's
# extra time is not one of them.

# %% tags=["hide-input"]
ruled = {name: outliers.ruled_out(explained[name]) for name in ("forum", "sweep", "allocator") if name in explained}
table = pd.concat(ruled).round(2) if ruled else rec.lacks("forum", "sweep", "allocator")
with pd.option_context("display.max_colwidth", None):  # each cell quotes its copy's numbers: show them whole
    display(table)

# %% [markdown]
# ## 7 · The first copy after a pause
#
# *Does a copy cost more when no copy ran for a while?* A small copy's time is mostly fixed
# costs, and one of them can depend on what came before: after a spell without copies a
# small copy can be slower, consistent with some part waking up (the GPU's copy engine, its
# PCIe link, the driver or the host: the tables cannot say which). The recording's `idle`
# runs measure this with the kit itself (`h2dlab measure --pause MS`): before each timed copy
# the kit makes a tiny GPU submission and waits for it, then spins the CPU for the pause while
# the GPU has nothing to do, then times the copy by CUDA events. The submission does not
# remove the cost, so the gap that matters here is the time since the previous copy ended:
# the pause plus the few milliseconds the kit's own loop spends between copies, and that
# loop's share differs from process to process (the finding gives each pause's median gap,
# so compare the gaps, not the pauses). It is not the only factor: whether the host thread
# spun or slept in the gap is not recorded, and a data loader's thread usually sleeps. Each
# pause ran in its own process, and processes differ: the finding says by how much, and a
# difference between pauses no larger than that is not the pause's doing. The same small
# copies after each pause:

# %% tags=["hide-input"]
display(Markdown(str(factors.idle_wake(rec.table("idle"))))) if rec.has("idle") else rec.lacks("idle")

# %% tags=["hide-input"]
plots.idle_pause(rec.table("idle"), name=f"{DATA}:idle") if rec.has("idle") else None;

# %% [markdown]
# `explain` reads these runs when it judges a slow small copy in the same recording: it names
# one `gpu_wake` only when the copy began at least as long after the previous one ended as the
# copies of the shortest pause at which these runs show the cost did (their median gap), and
# its extra time is no more than they show. When the cost starts is this recording's answer,
# not necessarily your machine's: record your own (`h2dlab record --only idle`). The kit's own loop
# leaves a few milliseconds between copies (its bookkeeping and evidence reads run there), so what a pause costs
# on your machine decides whether the kit's small-copy figures carry a wake-up. In your own
# code, a copy issued after the GPU has waited for the host (data loading, say) can pay it.

# %% [markdown]
# ## 8 · PyTorch's own waiting threads
#
# *Could PyTorch itself be behind the copies no cause fits?* Between parallel regions, the
# OpenMP threads that run PyTorch's CPU work wait for the next one, by default spinning for a
# while before they sleep, and the thread that starts a parallel region (here, the one timing
# the copy) waits for the others to finish it the same way. A thread that waits by spinning
# stays on its CPU, so in the table its wait looks like plain CPU work: no wait to run, no
# sleep. The bundled `h200_omp` recording (an H200 of the same model and VM build as the
# bundled recording, made the day before it, whatever `DATA` this notebook shows) ran one interleaved plan three times with the
# default and three times with `OMP_WAIT_POLICY=PASSIVE`, each run in its own process, the
# policy stored in its env.json; its tables read each other thread's own CPU clock:

# %% tags=["hide-input"]
display(Markdown(str(factors.openmp_wait(datasets.load("h200_omp")))))

# %% [markdown]
# To try it on your machine, run one plan twice, the second time with the variable set, and
# explain both: `h2dlab measure --sizes 1KiB..64MiB --order interleaved --out a.csv`, then
# `OMP_WAIT_POLICY=PASSIVE h2dlab measure ... --out b.csv`, and `h2dlab explain a.csv`,
# `h2dlab explain b.csv`. Both runs' env.json record the OpenMP settings they ran under.

# %% [markdown]
# ## 9 · Look at one slow copy yourself
#
# *What if the table cannot say more?* Trace the copy. `examples/trace_one_copy.py` records one
# pageable copy with `torch.profiler` and writes a trace that
# [Perfetto](https://ui.perfetto.dev) or `chrome://tracing` opens: the host's staging work and
# the copy engine's transfers on one time axis. It needs a CUDA GPU, so it is shown here, not run.

# %% tags=["hide-input"]
Code(filename="../examples/trace_one_copy.py", language="python")
