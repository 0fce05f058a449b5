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
# # 07 · The fleet: which GPUs move data slower than their peers, and why
#
# `h2dlab survey` runs on every GPU of every node under the launcher a fleet already has:
# `torchrun --nnodes=N --nproc-per-node=8 -m h2dlab survey --out DIR`, or
# `srun --ntasks-per-node=8 python -m h2dlab survey --out DIR`, with `DIR` on a shared
# filesystem. Each rank times copies from pinned (page-locked) and from pageable memory, both
# ways, alone and with its node's other GPUs copying at once. It also reads its PCIe link and
# NUMA (non-uniform memory access) placement. Rank 0 writes one
# table, `fleet.csv.gz`, and names each sick GPU with the evidence. This page reads that table.

# %% tags=["parameters"]
FLEET = None  # a survey's fleet.csv.gz; None: the bundled one-GPU survey, data/h200_survey

# %%
from pathlib import Path

from IPython.display import Markdown, display

from h2dlab import datasets, survey
from h2dlab.escape import md_code, md_text
from h2dlab.survey import verdicts

path = Path(FLEET) if FLEET else datasets.DATA_DIR / "h200_survey" / "fleet.csv.gz"
fleet = datasets.read(path) if path.exists() else None
gpus = survey.judge(survey.gpu_table(fleet)) if fleet is not None else None
source = survey.source_line(fleet.attrs["env"] or {}, path.name) if fleet is not None else ""
display(Markdown(
    f"**{survey.summary_line(gpus)}** ({md_text(source)})" if gpus is not None
    else f"No survey at {md_code(path)}: run `h2dlab survey --out DIR` and set `FLEET` to `DIR/fleet.csv.gz`."
))

# %% [markdown]
# ## 1 · The flagged GPUs, each with its reason
#
# A GPU is flagged when one of the rules below holds; each flag carries a sentence that a reader
# can check against the figures that follow. An empty table means no GPU broke a rule.

# %% tags=["hide-input"]
rules = Markdown(
    f"- `slow`: a bandwidth below {verdicts.PEER_RATIO}x the median of its identical GPUs "
    f"(same model, at least {verdicts.MIN_PEERS}), or a robust z-score (distance from that median "
    f"in median absolute deviations, floored at {verdicts.MAD_FLOOR:.0%} of it) below {verdicts.ROBUST_Z};\n"
    "- `link_degraded`: the PCIe link ran below the generation or width that the GPU and its slot "
    "can reach, read while copies ran;\n"
    "- `wrong_numa`: the process ran on CPUs of another NUMA (non-uniform memory access) node than the GPU's;\n"
    "- `replays`: the PCIe replay counter rose during the survey;\n"
    f"- `unsteady`: a pinned bandwidth measured alone varied by more than {verdicts.CV_MAX:.0%} "
    "(coefficient of variation: standard deviation over mean); pageable copies vary with the host, "
    "so they count only where no pinned copy was made (`--device cpu`);\n"
    "- `error`, `no_result`: the rank failed, or gave nothing by the deadline."
)
display(rules)
if gpus is not None:
    display(gpus.loc[gpus["flag"] != "", ["host", "rank", "local_rank", "gpu_uuid", "flag", "reason"]])

# %% [markdown]
# ## 2 · Each metric across the fleet, node by node
#
# One dot per GPU, one column per host; flagged GPUs are red crosses labelled with their rank.
# A large pinned copy by one GPU alone measures mostly the link (a link figure), so it moves
# least from run to run. Pageable copies include a host-side copy, and copies with the node's
# other GPUs at once share the host's memory: these host-side figures move with the host's load,
# and so does the smallest copy's latency. With fewer identical GPUs than the `slow` rule asks
# for, there is no median to compare with, and no GPU is called slow.

# %% tags=["hide-input"]
for metric in (survey.metric_columns(gpus) + ["latency_us"]) if gpus is not None else []:
    if gpus[metric].notna().any():
        survey.plot_metric(gpus, metric, source=source)

# %% [markdown]
# ## 3 · The link and the placement of each GPU

# %% tags=["hide-input"]
if gpus is not None:
    display(gpus[["host", "rank", "gpu_name", "link_gen_load", "link_width_load", "link_gen_max",
                  "link_width_max", "gpu_numa_node", "cpu_numa_nodes", "replays_before",
                  "replays_after", "omp_num_threads"]])
