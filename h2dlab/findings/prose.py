"""Sentences the notebooks show that name things read from files: a recording's folder, its
GPU, its kinds. Every such value goes through :mod:`h2dlab.escape` here, so that a
notebook cell builds no Markdown from a raw file value (an env.json can hold ``<script>``
or ``*bold*``). No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence

from h2dlab.escape import md_code, md_text
from h2dlab.explain.finding import Finding

__all__ = ["explain_commands", "machine_line"]


def explain_commands(where: str, kinds: Sequence[str]) -> Finding:
    """The ``h2dlab explain`` commands for the recording ``where`` (``h200`` or its folder)
    and those of its ``kinds`` that a notebook does not show; a sentence saying there are
    none where ``kinds`` is empty (issue 31: a command for a kind the recording lacks).

    Parameters
    ----------
    where
        The recording as the command line names it.
    kinds
        The kinds it holds that the reader may explain too (e.g. ``["batch", "d2h"]``).

    Returns
    -------
    Finding
        Its ``verdict`` is the Markdown; ``holds`` when there is something to name.
    """
    if not kinds:
        return Finding("This recording has no other kinds to explain.", False)
    cmds = ", ".join(md_code(f"h2dlab explain {where}:{k}") for k in kinds)
    return Finding(f"Explain this recording's other kinds too: {cmds}.", True, {"kinds": list(kinds)})


def machine_line(gpu: object, name: object, *, bundled: bool) -> Finding:
    """Notebook 02's line under the machines figure: which bar is this recording's machine
    (``gpu`` from its env.json, ``name`` the recording's), or, for the bundled recording,
    how to put one's own beside it.

    Parameters
    ----------
    gpu
        The GPU's name as the recording's env.json gives it.
    name
        The recording's name (a folder name for a live recording).
    bundled
        Whether the notebook shows the bundled recording itself.

    Returns
    -------
    Finding
        Its ``verdict`` is the Markdown; ``holds`` when there is something to name.
    """
    if bundled:
        return Finding(
            "This notebook shows the bundled H200 recording itself, so it stands beside the forum's A100 alone. "
            'Set `MODE = "live"` on a CUDA machine, or `DATA` to a recording folder, to put yours beside them.',
            False,
        )
    return Finding(
        f"This recording's machine ({md_text(gpu)}) is {md_code(name)} in the figure and the table.", True
    )
