"""causes_faults.fault_cause on synthetic (made-up) rows built by hand: faults must be many
more than the neighbours' and able to account for the extra time; a major fault is named."""

import numpy as np
import pandas as pd
import pytest

from h2dlab.explain.causes_faults import MAX_MS_PER_MINOR_FAULT, MIN_EXTRA_FAULTS, fault_cause


def _row(faults, majflt=0.0, *, size=393216, expected=0.5, host_allocs=0.0, proc=True):
    row = pd.Series(
        {"size_bytes": size, "expected_ms": expected, "majflt": majflt, "host_allocs": host_allocs}
    )
    if proc:
        row["proc_faults"] = faults
    return row, pd.Series({"faults": float(faults), "fault_typ": 0.0})


def test_few_minor_faults_do_not_explain_a_long_extra():
    row, ctx = _row(8)  # 8 minor faults, 14.5 ms extra: 1.8 ms a fault, far above the bound
    assert fault_cause(row, ctx, 15.0, "slow") is None


def test_minor_faults_that_can_account_for_the_extra_are_named_with_their_cost():
    n = 40
    extra = n * MAX_MS_PER_MINOR_FAULT  # exactly at the bound: still explained
    row, ctx = _row(n)
    cause, text = fault_cause(row, ctx, 0.5 + extra, "slow")
    assert cause == "page_faults"
    assert text == (
        "slow; 40 page faults during the copy (every thread of the process) (0.42 per 4 KiB page of "
        "the payload, where its neighbours had 0.00): 160 KiB of pages, the extra 2.00 ms; 12.80 ms per "
        "faulted MiB: the kernel was mapping host memory (first touch)"
    )
    assert fault_cause(row, ctx, 0.5 + extra * 1.01, "slow") is None


def test_a_major_fault_may_explain_milliseconds_and_is_named():
    row, ctx = _row(8, majflt=1.0, host_allocs=np.nan, proc=False)
    cause, text = fault_cause(row, ctx, 15.0, "slow")
    assert cause == "page_faults"
    assert "1 of them major (a page read from storage" in text and "every thread" not in text
    assert text.endswith("(first touch, or a new pinned block) or reading it in")


@pytest.mark.parametrize("faults", [MIN_EXTRA_FAULTS - 1, 4])
def test_too_few_faults_above_the_neighbours_never_fire(faults):
    row, ctx = _row(faults, majflt=1.0)
    assert fault_cause(row, ctx, 15.0, "slow") is None


def test_unmeasured_faults_give_no_cause():
    row, ctx = _row(100)
    ctx["faults"] = np.nan
    assert fault_cause(row, ctx, 1.0, "slow") is None


def test_the_checks_an_unexplained_copy_names_as_not_made_are_checks():
    from h2dlab.explain.causes_evidence import CHECKS, UNCHECKED

    assert list(UNCHECKED) == [c for c in CHECKS if c in UNCHECKED] and len(UNCHECKED) == 5
