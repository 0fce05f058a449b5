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
# # 05 · Explore
#
# Pick a recorded dataset, a run of yours under `data/runs/`, or *measure this machine now*
# (GPU only); choose strategies, a size range and a view. The figure, the fitted model and
# the flagged copies with their causes update in place. A live sweep shows its progress and
# can be stopped without losing the rows already measured.

# %% tags=["parameters"]
MODE = "auto"

# %%
from h2dlab.show.explore import Explorer

explorer = Explorer(MODE)
explorer

# %% [markdown]
# Where this page is read without a running kernel (a rendered copy), the widgets above
# cannot draw; here is the explorer's starting view as a plain figure.

# %%
explorer.snapshot()
