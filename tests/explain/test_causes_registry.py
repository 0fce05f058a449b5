"""Causes as data (issue 29): each cause is one ``registry.Cause`` entry in the registry of its
family, explain() tries them in order where the table has the columns an entry needs, and a
new cause registered in one place is used by explain() — shown with a toy cause on a
synthetic (made-up, not measured) table."""

import numpy as np
import pandas as pd
import pytest

from h2dlab.explain import causes, outliers
from h2dlab.explain.causes_evidence import PER_COPY, slow_text
from h2dlab.explain.registry import Cause, Registry
from h2dlab.explain.rows import value_ms
from h2dlab.recording import datasets

#: The vocabulary in the order causes are tried (the JSON, notebook 03 and the figures read these names).
ORDER = [
    "context_init", "host_alloc_growth", "device_alloc",
    "page_faults", "host_preempted", "host_blocked", "gc_pause", "other_threads", "host_parallel",
    "host_crowded", "gpu_shared", "gpu_clock_low",
    "episode", "gpu_wake", "host_stall", "unexplained",
]  # fmt: skip
TOY_SENTENCE = "the toy counter rose during the copy"


def synthetic_run(spike_at: int = 37, *, toy: bool = True) -> pd.DataFrame:
    """A SYNTHETIC run: one strategy, 8 sizes x 10 reps, latency = 10 us + bytes / 20 GB/s
    exactly, row ``spike_at`` 6x slow; ``toy_count`` 1 on that row, 0 elsewhere (where ``toy``)."""
    sizes = np.repeat(2 ** np.arange(12, 20), 10)
    ms = 0.010 + sizes / 20e6
    ms[spike_at] *= 6
    df = pd.DataFrame(
        {
            "run_id": "synthetic",
            "order": np.arange(len(sizes)),
            "strategy": "pageable",
            "size_bytes": sizes,
            "rep": np.tile(np.arange(10), 8),
            "warmup": False,
            "wall_ms": ms,
            "event_ms": ms,
            "host_allocs": 0.0,
            "device_allocs": 0.0,
            "empty_cache": False,
            "error": "",
            "shape": "",
            "dtype": "uint8",
            "t_s": np.concatenate([[0.0], np.cumsum(ms[:-1] + 0.5)]) / 1000,  # back to back, 0.5 ms apart
        }
    )
    if toy:
        df["toy_count"] = np.where(np.arange(len(df)) == spike_at, 1.0, 0.0)
    return datasets.validate(df)


def _toy_context(df: pd.DataFrame) -> dict[str, pd.Series]:
    """The toy rule's own context: the run's median toy count."""
    med = df["toy_count"].groupby(df["run_id"]).transform("median") if "toy_count" in df else np.nan
    return {"toy_typ": pd.Series(med, index=df.index, dtype=float)}


def _toy_test(row, ctx, val, slow):
    if not row["toy_count"] > ctx["toy_typ"]:
        return None
    return f"{slow}; {TOY_SENTENCE} ({row['toy_count']:g}, its run's median {ctx['toy_typ']:g})"


TOY = Cause(
    "toy_counter",
    "a synthetic cause for this test",
    needs=("toy_count",),
    test=_toy_test,
    context=_toy_context,
)


@pytest.fixture
def toy_registered():
    """The toy cause, registered in one place: the per-copy family, before gpu_shared."""
    PER_COPY.register(TOY, before="gpu_shared")
    try:
        yield TOY
    finally:
        PER_COPY.unregister(TOY.name)


def test_the_vocabulary_is_read_from_the_registries_in_the_order_tried():
    assert list(causes.CAUSES) == ORDER
    assert causes.ALLOCATOR.names() == ORDER[:3] and PER_COPY.names() == ORDER[3:12]
    assert causes.LIKELY.names() == ["gpu_wake", "host_stall"]
    assert causes.CAUSES["unexplained"].startswith("no evidence points anywhere")
    every = [*causes.ALLOCATOR, *PER_COPY, *causes.LIKELY]
    assert all(c.test is not None and c.means for c in every)
    assert causes.EPISODE.test is None and causes.UNEXPLAINED.test is None


def test_a_toy_cause_registered_in_one_place_is_used_by_explain(toy_registered):
    e = outliers.explain(synthetic_run())
    flagged = e[e["is_outlier"]]
    assert list(flagged.index) == [37]
    assert flagged.at[37, "cause"] == "toy_counter"
    v = value_ms(e).at[37]
    want = f"{slow_text(e.loc[37], v)}; {TOY_SENTENCE} (1, its run's median 0)"
    assert flagged.at[37, "evidence"] == want
    assert list(causes.CAUSES).index("toy_counter") == ORDER.index("gpu_shared")
    assert causes.CAUSES["toy_counter"] == "a synthetic cause for this test"
    assert "toy_typ" in causes.neighbours(synthetic_run()).columns  # its own context, once per table


def test_a_cause_whose_columns_the_table_lacks_is_never_tried():
    calls = []

    def always(row, ctx, val, slow):
        calls.append(row.name)
        return "always"

    PER_COPY.register(Cause("toy_always", "never without its column", needs=("toy_count",), test=always))
    try:
        plain = outliers.explain(synthetic_run(toy=False))
        assert calls == [] and plain.at[37, "cause"] == "unexplained"
        with_it = outliers.explain(synthetic_run())
        assert calls == [37] and with_it.at[37, "cause"] == "toy_always"
    finally:
        PER_COPY.unregister("toy_always")
    assert list(causes.CAUSES) == ORDER  # unregistered: the vocabulary is as before
    assert outliers.explain(synthetic_run()).at[37, "cause"] == "unexplained"


def test_a_registry_refuses_what_it_cannot_hold():
    r = Registry("toy", [TOY])
    with pytest.raises(ValueError, match="already have one named 'toy_counter'"):
        r.register(TOY)
    with pytest.raises(ValueError, match="have none named 'nothing'"):
        r.register(Cause("x", "x"), before="nothing")
    with pytest.raises(ValueError, match="have none named 'nothing'"):
        r.unregister("nothing")
    with pytest.raises(TypeError, match="Cause entries"):
        r.register("toy_counter")
    assert Cause("a", "a", needs=(("x", "y"), "z")).available(["y", "z"])
    assert not Cause("a", "a", needs=(("x", "y"), "z")).available(["x", "y"])


@pytest.fixture(scope="module")
def rich():
    """The bundled H200 batch table (schema 5: every per-copy column) with detect()'s columns."""
    return outliers.detect(datasets.load("h200_batch"))


@pytest.mark.slow  # about 0.3-2.6 s each on 2 cores
@pytest.mark.parametrize("entry", [*causes.ALLOCATOR, *PER_COPY, *causes.LIKELY], ids=lambda c: c.name)
def test_a_missing_needed_column_would_have_made_the_rule_say_nothing(rich, entry):
    """Skipping an entry whose columns a table lacks changes no cause: with any column it
    needs dropped, its test says nothing for every flagged copy (so the registry's ``needs``
    are true of the rules)."""
    flagged = rich.index[rich["is_outlier"].to_numpy(bool)]
    assert len(flagged) >= 10
    for need in entry.needs:
        dropped = list(need) if isinstance(need, tuple) else [need]
        if not set(dropped) <= set(rich.columns) or set(dropped) & set(outliers.EXPLAIN_COLUMNS):
            continue  # a column explain() requires cannot be missing
        t = rich.drop(columns=dropped)
        ctx = causes.neighbours(t)
        v = value_ms(t)
        said = [entry.test(t.loc[i], ctx.loc[i], v[i], "s") for i in flagged]
        assert said == [None] * len(flagged), (entry.name, dropped)
