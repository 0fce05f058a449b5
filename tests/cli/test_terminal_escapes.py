"""Escape sequences, other control characters and right-to-left overrides in a file's name or
a file's text reach the terminal only as visible text (issue 35, second hostile pass).

Before, a table named ``x<ESC>]0;owned<BEL>.csv`` or an env.json whose ``gpu_name`` held
``<ESC>[2J`` had the terminal set its title or clear the screen when a message named it. Now
every message the command prints passes through one helper, ``escape.terminal_text``
(``cli.common.TerminalSafe`` on stdout and stderr): such a character is written ``\\u001b``.
Tables and env.json files here are SYNTHETIC or measured on this machine (host copies only).
"""

from __future__ import annotations

import json
import tempfile
import unicodedata
from io import StringIO
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from h2dlab.cli import main as cli
from h2dlab.cli.common import TerminalSafe, terminal_safe_streams
from h2dlab.escape import TERMINAL_HIDDEN, terminal_text
from h2dlab.measure.harness import sweep
from h2dlab.measure.spec import SweepSpec
from h2dlab.recording import datasets


def hidden(text: str, keep: str = "") -> list[str]:
    """The characters of ``text`` a terminal would act on (outside ``keep``)."""
    return [c for c in text if c not in keep and c != "\u200d" and unicodedata.category(c) in TERMINAL_HIDDEN]


@given(st.text())
@example("\x1b]0;owned\x07\u202egpj.csv\r\n\udcff\U000e0001")
def test_terminal_text_leaves_nothing_a_terminal_acts_on(text):
    shown = terminal_text(text)
    assert hidden(shown) == []
    assert terminal_text(shown) == shown  # once is enough: nothing left to escape
    if text.isprintable():
        assert shown == text


@given(st.text().filter(lambda t: "\\" not in t and '"' not in t))
@example("a\x1bb\u202ec\udcff\U000e0001")
def test_terminal_text_shows_every_character_it_escapes(text):
    """Nothing is dropped: the escapes are JSON's, so decoding them gives the text back."""
    assert json.loads(f'"{terminal_text(text)}"') == text


@given(st.text(), st.sampled_from(["\n\t", "\n", ""]))
def test_terminal_text_keeps_only_what_it_is_told_to(text, keep):
    shown = terminal_text(text, keep=keep)
    assert hidden(shown, keep) == []
    assert [c for c in shown if c in keep] == [c for c in text if c in keep]
    replaced = terminal_text(text, keep=keep, replacement="\ufffd")
    assert hidden(replaced, keep) == [] and len(replaced) == len(text)


@given(st.lists(st.text(), max_size=5))
def test_every_write_through_the_commands_streams_is_safe(chunks):
    raw = StringIO()
    stream = TerminalSafe(raw)
    for chunk in chunks:
        print(chunk, file=stream)
    assert hidden(raw.getvalue(), "\n") == []
    assert raw.getvalue().count("\n") == sum(c.count("\n") for c in chunks) + len(chunks)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.text(
        st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=12
    )
)
@example("\x1b]0;owned\x07\u202e")
def test_a_file_name_in_an_error_reaches_the_terminal_inert(capsys, name):
    with tempfile.TemporaryDirectory() as folder:
        p = Path(folder) / f"{name}.csv"
        p.write_text("a,b\n1,2\n")  # not a measurement table: the error names the file
        assert cli.main(["explain", str(p)]) == 2
        assert cli.main(["explain", str(Path(folder) / f"gone{name}.csv")]) == 2
    out, err = capsys.readouterr()
    assert hidden(out + err, "\n") == []
    assert len(err.strip().splitlines()) == 2 and err.count("h2dlab: error: ") == 2


def test_text_from_an_env_json_and_a_warning_name_reach_the_terminal_inert(tmp_path, capsys):
    out = tmp_path / "cpu\x1b[2J.csv"
    sweep(SweepSpec(("pageable",), (1024,), device="cpu", reps=3, warmup=0, seed=0), out=out, progress=False)
    env = json.loads(datasets.env_path(out).read_text())
    env["gpu_name"] = "GPU\x1b]0;owned\x07\u202e"
    datasets.write_env(env, datasets.env_path(out))
    assert cli.main(["explain", str(out)]) == 0
    assert cli.main(["compare", str(out), "--json"]) == 0
    foreign = {**env, "run_id": "another\x1b[31m"}
    datasets.write_env(foreign, datasets.env_path(out))
    assert cli.main(["explain", str(out)]) == 0  # a warning names the env.json's run
    got, err = capsys.readouterr()
    assert "GPU\\u001b]0;owned\\u0007\\u202e" in got and "cpu\\u001b[2J.csv" in got + err
    assert "another\\x1b[31m" in err  # the warning quotes the run id with repr
    assert hidden(got + err, "\n") == []


def test_the_progress_bar_still_returns_over_its_line(tmp_path, capsys):
    """tqdm writes the raw stream: its carriage returns are the kit's own, not a file's."""
    args = ["measure", "--device", "cpu", "--strategies", "pageable", "--sizes", "1KiB"]
    assert cli.main([*args, "--reps", "3", "--warmup", "0", "--out", str(tmp_path / "r.csv")]) == 0
    err = capsys.readouterr().err
    assert "\r" in err and "\\u000d" not in err


def test_the_streams_are_put_back_after_the_command(capsys):
    import sys

    before = sys.stdout, sys.stderr
    with terminal_safe_streams():
        assert isinstance(sys.stdout, TerminalSafe) and sys.stdout.unfiltered is before[0]
        with terminal_safe_streams():  # never wrapped twice
            assert sys.stdout.unfiltered is before[0]
    assert (sys.stdout, sys.stderr) == before


@given(
    st.text(
        st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=12
    )
)
@settings(max_examples=25, deadline=None)
@example("\x1b]0;owned\x07\u202e")
def test_a_library_error_naming_a_file_is_inert_in_a_scripts_traceback_too(name):
    """Outside the command (a script, a notebook) Python prints the exception's text as it is."""
    from h2dlab.errors import UsageError
    from h2dlab.recording.schema import SchemaError

    with tempfile.TemporaryDirectory() as folder:
        for path in (Path(folder) / f"{name}.csv", Path(folder) / f"{name}.csv.gz"):
            with pytest.raises(SchemaError, match="no such file") as info:
                datasets.read(path)  # missing: the message names it
            assert hidden(str(info.value)) == []
    assert hidden(str(UsageError(f"bad {name}"))) == []
    assert str(UsageError(f"bad {name}\nh2dlab: all fine")).count("\\u000a") >= 1  # one line, all shown


def test_a_library_warning_naming_a_file_is_inert_too(tmp_path):
    """Python's own warning display writes the text as it is: the kit's warnings that carry a
    file's name or text pass it through ``terminal_text`` first."""
    out = tmp_path / "t\x1b]0;owned\x07\u202e.csv"
    sweep(SweepSpec(("pageable",), (1024,), device="cpu", reps=3, warmup=0, seed=0), out=out, progress=False)
    env = json.loads(datasets.env_path(out).read_text())
    datasets.write_env({**env, "run_id": "other\x1b[2J"}, datasets.env_path(out))
    with pytest.warns(UserWarning) as said:
        datasets.read(out)
    datasets.write_env({k: v for k, v in env.items() if k != "run_id"}, datasets.env_path(out))
    out.write_text(out.read_text().rstrip("\n"))  # a last line without its line end
    with pytest.warns(UserWarning) as cut:
        datasets.read(out)
    texts = [str(w.message) for w in [*said, *cut]]
    assert len(texts) == 3 and any("names no run" in t for t in texts) and any("line end" in t for t in texts)
    assert all(hidden(t) == [] and "\\u001b]0;owned\\u0007\\u202e" in t for t in texts)
