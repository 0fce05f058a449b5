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
# # 06 · Do the copies slow down *your* training step?
#
# Give this page a trace of a few steps of your own loop, written by `torch.profiler` or in
# two lines by the kit:
#
# ```python
# with h2dlab.profile("my-trace.json.gz") as p:
#     for batch in loader: train_step(batch); p.step()
# ```
#
# The doctor finds every copy between host and GPU in it. It measures the part of each copy
# that no kernel on another stream hides (its *exposed* time), and the GPU's idle time while
# the host issues a copy or pins its batch. It then estimates, from a recorded
# machine's fitted copy times, what each of the kit's recipes would leave of that time.
# Without a trace of yours, it reads a bundled one, recorded on the H200 with its ground
# truth (`data/traces`).
#
# The bundled traces are not notebook 02's decision table: their batch is 64 MiB, one tensor
# or (the `small_*` traces) 64 tensors of 1 MiB, and their step computes other products. Their `DataLoader` hands over ready-made batches with
# `num_workers=0`, and their resident step still runs the loader. Notebook 02's loader
# assembles batches in worker processes (its footer gives `num_workers`), and its resident step
# has no loader. So a loader with `pin_memory=True`, which copies each batch into pinned
# (page-locked) memory, can pay here and not there: compare like with like. The same holds for
# the side-stream prefetch: here it copies from a pinned buffer, there from the pinned loader,
# whose waits notebook 02's footer gives. Section 3 sets each bundled trace beside its ground truth.

# %% tags=["parameters"]
DATA = "h200"
MODE = "replay"

# %%
import pandas as pd
from IPython.display import Markdown, display

from h2dlab import doctor, session
from h2dlab.doctor.plot import lanes
from h2dlab.doctor.trace import env_beside
from h2dlab.escape import md_code, md_text
from h2dlab.recording.env import describe

TRACE = ""  # the path of your trace; empty: the bundled trace named by EXAMPLE
EXAMPLE = "batch_pageable"
rec = session.recording(DATA, mode=MODE)
dx = doctor.diagnose(doctor.trace_path(TRACE, EXAMPLE), recording=rec)
display(rec.banner())

# %% [markdown]
# ## 1 · How much do the copies add to a step, and what would change it?

# %% tags=["hide-input"]
display(Markdown(dx.summary()))
dx

# %% [markdown]
# ## 2 · Where in the step are the copies exposed?
#
# One lane per GPU stream: kernels in grey, copies coloured by the host memory they come
# from, and hatched where no kernel on another stream runs beside them. The step drawn is
# the one with the most exposed copy time.

# %% tags=["hide-input"]
lanes(dx);

# %% [markdown]
# ## 3 · The bundled traces beside their ground truth
#
# Each bundled workload was also timed without the profiler: its step, and the same step with
# the batch already on the GPU. The difference is its measured exposed copy time
# (`truth_exposed_ms`), beside the doctor's estimate from the trace (`doctor_exposed_ms`).
# `within` says whether they agree within 25 % or 0.5 ms. `first_recipe` is the recipe the
# doctor names first, and `first_is_fastest` whether the traces of its family measured it
# fastest (false where that recipe was not traced in the family). A negative measured exposed
# time means the step with the copy ran as fast as the resident one, within noise. Where
# `within` is false, `data/traces/README.md` says why for each trace. Either its traced steps
# ran longer than the same step timed without the profiler, or the GPU ran the matrix products
# faster after a copy alone on its stream, so the step grew by less than the copy's own time.

# %% tags=["hide-input"]
traces = doctor.TRACES
check = pd.read_csv(traces / "ground_truth.csv")[
    ["workload", "recipe", "step_ms", "resident_ms", "exposed_ms"]
].merge(
    pd.read_csv(traces / "doctor_check.csv")[
        ["workload", "doctor_exposed_ms", "within", "first_recipe", "first_is_fastest"]
    ],
    on="workload",
)
display(check.rename(columns={"exposed_ms": "truth_exposed_ms"}).round(2))
display(
    Markdown(
        f"data: {md_code(str(traces.name))}: `ground_truth.csv` recorded with the traces "
        f"({md_text(describe(env_beside(traces / 'batch_pageable.json.gz')))}); `doctor_check.csv` is the "
        "doctor's reading of them against the bundled `h200` recording (ties within 0.5 ms count as fastest)."
    )
)
