"""One record per strategy (issue 29): the code a name stands for and its colour in every
figure live in ``measure.names.RECORDS``; ``names.CODE`` and ``plots_style.PALETTE`` are read
from it, and every registered strategy has one."""

from h2dlab.measure import names

#: The figures' colours before the records held them (plots_style's literal, session 29):
#: a strategy keeps its colour across every figure and report.
COLOURS_BEFORE = {
    "pageable": "#d62728", "pageable_non_blocking": "#ff9896", "pin_then_copy": "#9467bd",
    "pin_then_copy_register": "#c5b0d5", "pinned_reuse": "#2ca02c", "host_register": "#8c564b",
    "staged": "#1f77b4", "tensordict": "#17becf", "pin_memory": "#9467bd", "pinned_to_cuda": "#2ca02c",
    "direct_to_cuda": "#d62728",
}  # fmt: skip


def test_every_registered_strategy_has_one_record_with_its_code():
    import h2dlab.measure.strategies
    import h2dlab.measure.strategies_d2h  # noqa: F401  (they register themselves)
    from h2dlab.measure.strategy import REGISTRY

    assert len(REGISTRY) >= 10
    for name in REGISTRY:
        assert names.RECORDS[name].code, name
        assert names.code(name) == names.RECORDS[name].code
    assert names.code("to_device") == "h2dlab.transfer.fastpath.to_device(x)"  # a benchmark name


def test_code_and_palette_are_read_from_the_records():
    from h2dlab.show.plots_style import PALETTE, palette_for

    assert names.CODE == {n: r.code for n, r in names.RECORDS.items()}
    assert PALETTE == COLOURS_BEFORE and list(PALETTE) == list(COLOURS_BEFORE)
    assert all(PALETTE[n] == r.colour for n, r in names.RECORDS.items() if r.colour)
    # A name without a colour of its own gets a spare one, never another strategy's.
    got = palette_for(["pageable", "loop_to"])
    assert got["pageable"] == "#d62728" and got["loop_to"] not in {"#d62728", None}
