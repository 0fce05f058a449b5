"""The report's workbook of a shared recording whose env.json text holds a control
character (hostile pass 3 of issue #35): an .xlsx cannot hold most C0 control characters,
so the kit writes them another way or says so in one line, never a traceback. The recording
is the bundled h200 one with its host name edited (SYNTHETIC)."""

import openpyxl

from h2dlab.recording import datasets


def test_the_report_workbook_of_a_recording_whose_env_json_holds_a_control_character(tmp_path):
    import json
    import shutil
    from pathlib import Path

    from h2dlab.show import workbook

    rec = tmp_path / "rec"
    shutil.copytree(Path(datasets.__file__).resolve().parents[2] / "data" / "h200", rec)
    for p in [rec / "env.json", *rec.glob("*/*.env.json")]:
        env = json.loads(p.read_text())
        env["hostname"] = "node\x07\x1b]0;x\x07-7"  # a shared recording's planted host name
        p.write_text(json.dumps(env))
    out = workbook.write(tmp_path / "w.xlsx", rec)
    readme = openpyxl.load_workbook(out)["README"]
    assert any("node" in str(c.value) and "-7" in str(c.value) for row in readme.iter_rows() for c in row)
