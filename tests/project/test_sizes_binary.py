"""Sizes take binary units only (issue #35): ``64M`` and ``64MB`` meant 64,000,000 bytes while
``KiB`` meant 1024, so one command line could mix two meanings. Decimal units are refused in
one line that says what to write; every accepted size round-trips through ``fmt_size``."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h2dlab.errors import UsageError
from h2dlab.units import UNITS, fmt_bytes, parse_size, parse_sizes

#: What must be refused: decimal units and bare letters, each case.
DECIMAL = ("k", "kb", "m", "mb", "g", "gb", "t", "tb")

BINARY = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


@pytest.mark.parametrize("text", ["64M", "64MB", "64mb", "2GB", "1k", "1KB", "3 TB", "1.5GB", "1G"])
def test_decimal_and_bare_units_are_refused(text):
    with pytest.raises(UsageError, match="binary units only") as err:
        parse_size(text)
    assert len(str(err.value).splitlines()) == 1


def test_the_refusal_says_what_to_write():
    with pytest.raises(UsageError) as err:
        parse_size("64MB")
    assert "write 64MiB or 64000000 (bytes)" in str(err.value)
    with pytest.raises(UsageError) as err:  # 0.3 KiB is no whole number of bytes: only the bytes
        parse_size("0.3KB")
    assert "write 300 (bytes)" in str(err.value) and "KiB or" not in str(err.value)


@settings(max_examples=300, deadline=None)
@given(number=st.decimals(min_value="0.001", max_value="100000", places=3), unit=st.sampled_from(DECIMAL),
       case=st.sampled_from([str.lower, str.upper, str.capitalize]))  # fmt: skip
def test_every_suggestion_in_a_refusal_reads_as_what_it_says(number, unit, case):
    """What the message tells the user to write is accepted, and means number x 1024^k or
    number x 1000^k bytes as it claims."""
    text = f"{number.normalize():f}{case(unit)}"
    with pytest.raises(UsageError) as err:
        parse_size(text)
    message = str(err.value)
    k = "kmgt".index(unit[0]) + 1
    ways = message.split(": write ", 1)[1].split(" or ")
    assert ways and all(ways)
    for way in ways:
        if way.endswith(" (bytes)"):
            assert parse_size(way.removesuffix(" (bytes)")) == number * 1000**k, message
        else:
            assert parse_size(way) == number * 1024**k, message


def test_the_command_line_refuses_a_decimal_size_in_one_line(capsys, tmp_path):
    from tests.conftest import refused_in_one_line

    line = refused_in_one_line(
        ["measure", "--device", "cpu", "--sizes", "64MB", "--out", str(tmp_path / "r.csv")],
        ["64MiB", "binary units only"],
        capsys,
        tmp_path,
    )
    assert "Traceback" not in line
    refused_in_one_line(["compare", "h200_sweep", "--sizes", "1GB"], ["1GiB"], capsys, tmp_path)


def test_the_accepted_units_are_bytes_and_binary_ones_only():
    assert {u for u in UNITS if u} == {"b", *BINARY}
    assert parse_size("64MiB") == 64 * 2**20 and parse_size("4096") == 4096 and parse_size("8 b") == 8


ACCEPTED = st.one_of(
    st.integers(1, 2**50).map(str),
    st.builds(
        lambda n, u, c: f"{n}{c(u)}",
        st.integers(1, 2**20),
        st.sampled_from(sorted(UNITS)),
        st.sampled_from([str.lower, str.upper, str.capitalize]),
    ),  # fmt: skip
    st.builds(lambda q, u: f"{q / 4}{u}", st.integers(1, 4000), st.sampled_from(["KiB", "MiB", "GiB"])),
)


@settings(max_examples=500, deadline=None)
@given(text=ACCEPTED)
def test_every_accepted_size_round_trips_through_the_formatter(text):
    from h2dlab.units import fmt_size

    n = parse_size(text)
    shown = fmt_size(n)
    assert parse_size(shown) == n, (text, shown)
    assert parse_sizes(shown) == [n]
    # fmt_bytes (tables) rounds to two places, and parses back within that rounding
    num, unit = fmt_bytes(n).split()
    scale = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]
    assert abs(float(num) * scale - n) <= 0.005 * scale * (1 + 1e-9)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 2**60))
def test_fmt_size_is_exact_and_short(n):
    from h2dlab.units import fmt_size

    shown = fmt_size(n)
    assert parse_size(shown) == n
    number, unit = shown.split()
    assert unit == "B" or (len(number.partition(".")[2]) <= 2 and float(number) >= 1)


@pytest.mark.parametrize(
    "n,text", [(1500, "1500 B"), (1536, "1.5 KiB"), (2359296, "2.25 MiB"), (2**30, "1 GiB"), (2**40, "1 TiB")]
)
def test_fmt_size_examples(n, text):
    from h2dlab.units import fmt_size

    assert fmt_size(n) == text
