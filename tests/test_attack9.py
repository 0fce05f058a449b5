"""Hostile inputs found by the ninth attack pass (tests/test_attack9.py)."""

import pandas as pd
import pytest

from h2dlab.findings import speed as findings_speed
from h2dlab.recording import datasets


@pytest.fixture(scope="module")
def sweep() -> pd.DataFrame:
    return datasets.load("h200_sweep")


@pytest.mark.parametrize("fn", [findings_speed.bandwidth, findings_speed.small_copy_floor])
def test_speed_findings_on_a_table_with_no_timed_copy_say_so(sweep, fn):
    """An empty selection (a typo'd strategy, only warm-up rows) raised pandas' 'cannot
    convert float NaN to integer' (bandwidth) or IndexError (small_copy_floor)."""
    for empty in (sweep.head(0), sweep[sweep.warmup]):
        with pytest.raises(ValueError, match=f"{fn.__name__} needs timed copies that succeeded"):
            fn(empty)


def test_small_copy_floor_refuses_what_is_no_table():
    with pytest.raises(TypeError, match="DataFrame"):
        findings_speed.small_copy_floor([])
