"""``h2dlab doctor`` refuses a trace holding a number too long to read in one line, exit 2
(hostile pass 4, issue 35: traceback).

Python reads at most 4,300 digits of an integer from text (``sys.int_info``); a synthetic
trace whose ``ts`` has 5,001 digits stopped the doctor with a ``ValueError`` traceback and
exit 1, ``--json`` too. Synthetic trace.
"""

from __future__ import annotations

import json

import pytest
from synthetic_traces import SyntheticTrace

from h2dlab.cli import main as cli


def _trace_with_a_long_number(tmp_path):
    t = SyntheticTrace()
    t.step(2, 0.0, 19000)
    t.copy(100, 120, 1000.0, 64 << 20, src="Pageable")
    t.kernel(1200, 5000.0, stream=7)
    text = json.dumps(t.document()).replace('"ts": ', '"ts": ' + "9" * 5001 + ', "x": ', 1)
    p = tmp_path / "long.json"
    p.write_text(text)
    return p


@pytest.mark.parametrize("flags", [[], ["--json"]])
def test_a_trace_with_a_number_too_long_to_read_is_refused_in_one_line_with_exit_2(tmp_path, capsys, flags):
    code = cli.main(["doctor", *flags, str(_trace_with_a_long_number(tmp_path))])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
