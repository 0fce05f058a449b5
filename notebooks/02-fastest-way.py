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
# # 02 · What is the fastest way to move a tensor to the GPU?
#
# Six ways to move a host tensor to the GPU, timed one copy at a time with CUDA events. Every
# power of two from a kibibyte into the gibibytes was timed, repeated, warm-ups kept and
# labelled; the figure's axis ends at the largest size recorded. The sizes run in *interleaved*
# order: each repetition visits every size and every strategy in turn. So a slow moment of the
# machine cannot pose as a property of one strategy or size.
#
# | strategy | what is timed |
# | --- | --- |
# | `pageable` | `x.to("cuda")` from ordinary memory: the driver stages it through its own pinned (page-locked) buffer |
# | `pageable_non_blocking` | `x.to("cuda", non_blocking=True)`, then synchronise: still staged |
# | `pin_then_copy` | `x.pin_memory().to("cuda")`: the forum's pattern, pinning included |
# | `pinned_reuse` | data already in a pinned buffer, copied into a preallocated device buffer |
# | `host_register` | pin the existing buffer in place (`cudaHostRegister`), copy, unregister |
# | `staged` | `h2dlab.transfer.fastpath.to_device(x)`: threads copy chunks into a pinned ring while earlier chunks are in flight |

# %% tags=["parameters"]
DATA = "h200"
MODE = "replay"

# %%
from IPython.display import Code, Markdown, display

from h2dlab import advice, compare_machines, datasets, factors, findings_spacing, findings_speed, findings_transfer, findings_workload, outliers, plots, recipes, session
from h2dlab.findings import prose, stability

rec = session.recording(DATA, mode=MODE)
sweep = rec.get("sweep", "pow2-interleaved")
cold = rec.get("allocator", "pin-emptied")
rec.banner()

# %% [markdown]
# ## The answer: which code should you paste?
#
# Each recipe in `examples/` ran inside a training-like step: the batch (`64x3x224x224` float32)
# goes to the GPU, then a fixed chain of matrix products consumes it, then the step waits for
# the GPU as `loss.item()` would. The same step ran with the batch already on the GPU. The
# difference is the *exposed copy time*: what the copy adds to every step. Below the table are
# the six recipes, each the file in `examples/` that the runs executed; the table says whether
# each paid in this recording. The rest of this notebook is the evidence, one copy at a time.

# %% tags=["hide-input"]
display(findings_workload.decision(rec.table("workload"), f"{rec.name} (workload)") if rec.has("workload") else rec.lacks("workload"), *(x for n in recipes.RECIPES for x in (Markdown(f"`examples/{recipes.path(n).name}`"), Code(recipes.source(n), language="python"))))

# %% [markdown]
# ## 1 · How fast is each way, from the smallest copy to the largest?
#
# A pinned copy's rate belongs to the link and hardly moves between recordings of one machine
# model. The rates of the ways that copy on the host first (`pageable`, `pin_then_copy`,
# `staged`) belong to the host, and they move: the section on pinning first gives the range of
# the pageable rate and of what pinning costs.

# %% tags=["hide-input"]
plots.bandwidth(sweep) if sweep is not None else display(rec.lacks("sweep/pow2-interleaved"));

# %% tags=["hide-input"]
display(advice.bandwidth(sweep)) if sweep is not None else None

# %% [markdown]
# ## 2 · What does a small copy cost?
#
# *Does the strategy matter when the copy is tiny?* Time per copy on log axes, with the fitted
# `overhead + bytes / bandwidth` model dashed.
#
# A small copy has two costs that must not be mixed: back to back, as in a loop of copies, and
# after an idle gap, when the GPU has waited. The finding below says which one this run shows,
# from the host time between copies. The reference check times the same copies with
# `torch.utils.benchmark` in the same process.

# %% tags=["hide-input"]
plots.latency(sweep) if sweep is not None else display(rec.lacks("sweep/pow2-interleaved"));

# %% tags=["hide-input"]
if sweep is not None:
    display(advice.small_copy_floor(sweep), advice.memory_kind(sweep, 2**16), advice.memory_kind(sweep, 2**20))

# %% tags=["hide-input"]
display(findings_spacing.reference_agreement(rec.env("reference", "reference").get("reference", []) if rec.has("reference", "reference") else []))

# %% [markdown]
# ## 3 · Does pinning first pay?
#
# PyTorch's pin_memory/non_blocking tutorial says `x.pin_memory().to("cuda")` can be slower than
# `x.to("cuda")`. Whether it is depends on two things. Does the caching host allocator already
# hold a free pinned block of the request's power-of-two class? And is the tensor large enough
# for the faster DMA (direct memory access: the GPU's copy engine reads host memory itself) to
# repay the extra host copy? The figure puts the first call (a new block) beside calls whose
# block was cached, against plain pageable and pinned copies.
#
# Two kinds of figure answer it. A pinned copy's rate belongs to the link: it hardly moves
# between recordings of one machine model. A pageable copy's rate and what pinning costs belong
# to the host: they move. So the sentences after the figure give each host-side figure its range
# across the recordings of this GPU model that the kit holds. Last, the forum's own A100 table
# answers the same question.

# %% tags=["hide-input"]
plots.pin_cost(sweep, cold=cold, register=rec.get("allocator", "pin-register-emptied")) if sweep is not None and cold is not None else display(rec.lacks("sweep/pow2-interleaved", "allocator/pin-emptied"));

# %% tags=["hide-input"]
if sweep is not None and cold is not None:
    display(advice.pin_first_pays(advice.advice(sweep, 2**26, cold=cold)), advice.pin_cached_pays(sweep),
            advice.registering_cost(sweep))

# %% tags=["hide-input"]
display(stability.for_recording(rec), stability.forum_pinning(outliers.explain(datasets.load("forum_a100")), rec.get("forum")))

# %% [markdown]
# ## 4 · The staged copy against PyTorch's own ways, in one run
#
# *Does staging through a pinned ring beat what PyTorch offers, and what bounds it?*
# `benchmarks/bench_transfer.py` timed, in one process, `to_device` beside `x.to("cuda")`,
# pin-then-copy, TensorDict's multithreaded pinning and reused pinned buffers. It also timed a
# multithreaded host `memcpy` from pageable into pinned memory alone. And it timed the bounds of
# a staged copy: the host copy and the pinned DMA, each alone and each while the other runs.
#
# Two runs are bundled, both on H200 machines. The one shown here ran on the lent H200 machine
# in a session of its own, not the bundled recording's: the figure's footnote gives its date,
# `data/README.md` the VM build of each.
# The other ran on a host with twice its cores (`h200x2`; `benchmarks/README.md` has both).

# %% tags=["hide-input"]
bench = datasets.load_benchmark("h200")
plots.benchmark(bench);

# %% tags=["hide-input"]
display(advice.host_copy_ceiling(bench), findings_speed.staged_bounds(bench))

# %% [markdown]
# ## 5 · Where the time of one staged copy goes
#
# *What keeps `to_device` below its bounds?* One staged copy from the same run, chunk by chunk,
# with the settings the run tuned; its size is in the figure's title. The host clock gives each
# staging thread's waits for a slot, its host copies and its DMA hand-overs. CUDA events give
# each chunk's DMA.

# %% tags=["hide-input"]
tl = bench.get("timeline_256MiB")
if tl:
    plots.staged_timeline(tl, env=bench["env"])
    display(findings_speed.staged_timeline(tl, bench))
else:
    display(Markdown("This benchmark result has no timeline of a staged copy."))

# %% [markdown]
# ## 6 · The answer: one advice table
#
# *So which way should you use?* The same table as in notebooks 01 and 04 (the README sums it
# up). *Per copy* is the median with its quartiles; *up front* is what a way pays once before its
# first copy (pinning in place).
#
# The first call of `pin_memory()` is every copy that had to make a new pinned block. In this
# sweep those are warm-ups of the sizes whose block class was not cached yet. In the run with the
# host cache emptied before each size, there is one per size. *Basis* says how many copies each
# figure rests on. A first-call figure at a size is one copy: read it as one measurement, not a
# median. Where none was timed, it is scaled from nearby sizes.
#
# Where the recording has them, results coming back and a batch of many tensors are cases of
# their own. Each is compared with its plain way (`.cpu()`; a loop of `.to()`). A batch way marked
# "pinned beforehand" did not time its pinning.

# %% tags=["hide-input"]
extra = {kind: rec.table(kind, run) for kind, run in (("d2h", "d2h"), ("batch", "equal")) if rec.has(kind, run)}
adv = advice.advice(sweep, 2**30, cold=cold, **extra) if sweep is not None else None
plots.advice_bars(adv, name=rec.name, source=sweep) if adv is not None else display(rec.lacks("sweep/pow2-interleaved"));

# %% tags=["hide-input"]
if adv is not None:
    display(adv[["case", "what", "code", "per_copy_ms", "q1_ms", "q3_ms", "gbps", "upfront_ms", "verdict", "basis"]].round(2))
    display(advice.best_way(adv), advice.best_way(adv, copies=100), advice.pin_first_pays(adv))
    display(*(advice.best_way(adv, case=case) for case in adv.case.unique()[1:]))

# %% [markdown]
# ## 7 · Results back to the host: is device → host as fast?
#
# *Does the way back cost the same?* Results, logits and checkpoints return with `.cpu()` (into
# pageable memory) or into a pinned buffer. Four ways back, timed in one run beside two ways there;
# solid lines host → device, dashed device → host. A common guess is that the way back mirrors the
# way there; the second sentence below checks it for `.cpu()`, which makes a new pageable tensor
# at every call:

# %% tags=["hide-input"]
if rec.has("d2h"):
    plots.directions(rec.table("d2h"))

# %% tags=["hide-input"]
display(*(findings_transfer.direction_bandwidth(rec.table("d2h")), findings_transfer.pageable_back(rec.table("d2h")))
        if rec.has("d2h") else
        (Markdown("This recording has no device-to-host copies, so this notebook cannot compare the two directions."),))

# %% [markdown]
# ## 8 · Both directions at once: is the link full duplex?
#
# *Can a copy in and a copy out share the link without slowing each other?* PCIe (the host's PCI Express link to the GPU) sends in both
# directions at once on separate lanes. Each size below was copied host → device and
# device → host on two streams together, and each direction alone:

# %% tags=["hide-input"]
if rec.has("bidir"):
    plots.duplex_aggregate(rec.table("bidir"))

# %% tags=["hide-input"]
display(findings_transfer.duplex_summary(rec.table("bidir")) if rec.has("bidir") else
        Markdown("This recording has no copies in both directions at once, so it cannot say how close the link "
                 "comes to full duplex."))

# %% [markdown]
# ## 9 · A batch of many small tensors
#
# *What does each extra tensor cost, and which way moves a batch fastest?* A training step moves
# a batch: many tensors, of equal or mixed sizes. Each method moved the same bytes split into
# more and more tensors of equal size. The figure shows the time per tensor at the smallest batch
# total. The methods: `loop_to` is a loop of `.to()`, `loop_non_blocking` the same with
# `non_blocking=True`. `pinned_each` and `foreach_copy` copy from tensors pinned beforehand: their
# pinning is not timed. `tensordict` pins inside the timed call. `pinned_flat` times its packing
# into one pinned buffer. `to_device_packed` packs the batch with `torch.cat` and sends it with
# the kit's `to_device`.

# %% tags=["hide-input"]
if rec.has("batch", "equal"):
    plots.batch_overhead(rec.table("batch", "equal"))

# %% tags=["hide-input"]
batch = rec.table("batch", "equal") if rec.has("batch", "equal") else None
display(*(findings_transfer.batch_overhead(batch), findings_transfer.best_batch_method(batch)) if batch is not None else
        [Markdown("This recording has no batches of many tensors, so this notebook does not advise on them.")])

# %% [markdown]
# ## 10 · Several GPUs at once
#
# *Do several GPUs fed from one host slow each other down?* Copies fed from one host
# may compete for its cores and memory bandwidth and, if the GPUs share a switch, for PCIe lanes;
# whether they do is what the run measures. `h2dlab measure --gpus 1..2` runs one process per GPU,
# starting every size together behind a barrier.

# %% tags=["hide-input"]
if rec.has("concurrent"):
    plots.concurrency(rec.table("concurrent"))

# %% tags=["hide-input"]
display(factors.concurrency(rec.table("concurrent")) if rec.has("concurrent") else
        Markdown("This recording has no run of several GPUs at once."))

# %% [markdown]
# ## 11 · Your machine beside the H200 and the A100
#
# *How does this recording's machine differ from the bundled H200 and the forum's A100?* The same
# few numbers for each: bandwidth per strategy, the small-copy floor, what `pin_memory()` costs,
# and the forum protocol's pinned-cache growth. Each is defined once, in the table under the
# figure (`compare_machines.METRICS`): which size and which runs it reads. They can differ from
# the figures earlier in this notebook and in notebook 01, which read other sizes or pool other
# runs. The A100 has only the forum's table, so it has only the forum's rows.

# %% tags=["hide-input"]
machines = compare_machines.compare(None if rec.bundled else rec)
plots.machines(machines);

# %% tags=["hide-input"]
display(prose.machine_line(machines.gpu.iloc[0], rec.name, bundled=rec.bundled))
display(compare_machines.wide(machines), compare_machines.definitions())
