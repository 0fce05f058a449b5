"""One planned step of a measuring loop: its rows made from the plan, the step timed, a
failure kept (or the run stopped), the rows written and the progress bar moved. The batch,
both-ways and workload runs each make one :class:`Steps` and call it once per step of their plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from h2dlab.measure.failures import keep_failure
from h2dlab.measure.recorder import Recording
from h2dlab.measure.timing import Timer

__all__ = ["Steps", "empty_row"]


def empty_row(plan_row: dict[str, Any], t_s: float) -> dict[str, Any]:
    """A table row for ``plan_row`` with nothing measured yet (NaN times, no error)."""
    row = {k: plan_row[k] for k in ("order", "strategy", "direction", "size_bytes", "rep", "warmup")}
    row.update(t_s=t_s, wall_ms=np.nan, event_ms=np.nan, host_allocs=np.nan, device_allocs=np.nan,
               empty_cache=False, error="", n_tensors=plan_row.get("n_tensors", 1), dtype="uint8")  # fmt: skip
    return row


@dataclass(frozen=True)
class Steps:
    """A run's measuring loop: calling it times one planned step (:meth:`__call__`).

    Attributes
    ----------
    run, timer, dev
        The run's recording, its ``Timer`` and its device.
    bar
        The progress bar, moved by each step's row count once its rows are written, or None.
    """

    run: Recording
    timer: Timer
    dev: torch.device
    bar: Any = None

    def __call__(
        self,
        plan_rows: list[dict[str, Any]],
        step: Callable[[], Any] | None,
        *,
        columns: dict[str, Any] | None = None,
        error: str = "",
        before: Callable[[], None] | None = None,
        check: Callable[[Any, list[dict[str, Any]]], None] | None = None,
    ) -> str:
        """Time ``step`` once for ``plan_rows`` (one row each, all stamped at the same ``t_s``)
        and write the rows to the run, failed or not.

        Parameters
        ----------
        plan_rows
            The planned rows this step measures (two for a both-ways copy, else one).
        step
            The timed work; not called (it may be None) when ``error`` is given.
        columns
            Columns set on every row over :func:`empty_row`'s (``shape``, ``dtype``).
        error
            The rows' ``error`` when the step is not to run (it failed before, or could not
            be prepared): the rows are written with it and nothing is timed.
        before
            Called after the rows are stamped and before the timing when the step runs (a
            block of steps starting).
        check
            ``check(result, rows)`` after the timing: the step's result, checked, may set a
            row's ``error`` (a wrong result). What it raises is kept as a failure.

        Returns
        -------
        str
            The ``error`` text of a failure kept (an out-of-memory error, a ``RuntimeError``),
            else ``""``. A CUDA fault writes the rows and raises ``CudaFault``
            (see :func:`h2dlab.measure.failures.keep_failure`).
        """
        run = self.run
        t_s = run.elapsed()
        rows = [{**empty_row(r, t_s), **(columns or {}), "error": error} for r in plan_rows]
        failure = ""
        if not error:
            if before is not None:
                before()
            try:
                result, rec = self.timer(step)
                for row in rows:
                    row.update(rec)
                if check is not None:
                    check(result, rows)
                del result
            except Exception as exc:  # noqa: BLE001 - kept as the rows' error, then on
                failure = keep_failure(exc, rows, run, self.dev)
        for row in rows:
            run.write(row)
        if self.bar is not None:
            self.bar.update(len(rows))
        return failure
