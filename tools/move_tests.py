"""Move each test file into the folder of the package part it protects (issue 29, item 5).

Run once from the repository root: ``python tools/move_tests.py``. It ``git mv``s every
``tests/test_*.py`` named in :data:`FOLDER` to ``tests/<folder>/``, then rewrites, in the
tracked text files, what named the old place: ``from tests.test_x import`` lines, paths
``tests/test_x.py`` (docs, pyproject's mutmut selection, .ci/run), the keys of the ``SLOW``
list in tests/conftest.py, and ``Path(__file__)`` walks of a moved file (one level deeper).
Shared helpers (conftest.py, fake_cuda.py, synthetic_*.py, data/) stay at tests/ top.
Idempotent: a file already moved is left alone.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: folder -> test files (stems without ``test_``) whose behaviour that package part owns.
#: ``project`` holds what spans the whole kit: layers, packaging, README, notebooks,
#: benchmarks, the top-level modules (units, escape, errors).
GROUPS = {
    "measure": [
        "batch", "concurrent", "directions", "duplex", "env_belongs", "gc_steady", "measure",
        "nvml", "recorder", "recorder_safety", "reference", "resume_finished", "row_line",
        "spec", "spec_properties", "stop_at_finish", "strategy_record", "threadstat",
        "threadstat_others", "timer_window", "timing", "workload",
    ],
    "transfer": ["transfer", "chunk_splits", "fastpath_schedule"],
    "recording": [
        "datasets", "decompression_bombs", "env", "live_errors", "live_resume_consent",
        "out_guard", "out_in_data", "record", "record_compare", "record_env_allowlist",
        "record_lock", "record_plan", "recorded", "recording_detection", "session", "sighup",
        "validate",
    ],
    "explain": [
        "analysis", "causes_faults", "causes_registry", "causes_stall", "causes_threads",
        "explain_fit", "explain_scale", "hand_made_text", "host_pace", "hostile_reads",
        "idle_machines", "idle_robust", "idle_wake_gaps", "linefit", "model",
        "outliers_crowded", "outliers_episodes", "outliers_parallel", "outliers_pinned",
        "outliers_sched", "outliers_synthetic", "outliers_wake", "small_copy_spacing",
        "unexplained_share", "wake_calibration", "wake_per_run",
    ],
    "findings": [
        "factors", "factors_idle", "factors_openmp", "findings", "findings_advice",
        "findings_sentences", "findings_stability", "findings_transfer", "findings_tutorial",
        "findings_workload", "prose_escaping",
    ],
    "show": [
        "browser", "explore", "figure_text", "lab", "plots", "plots_fastpath", "record_report",
        "report", "report_escaping", "report_html", "report_index", "report_interrupt",
        "report_missing_kinds", "report_workbook", "xlsx_formulas",
    ],
    "cli": [
        "bad_input", "cli", "cli_compare", "cli_light", "cli_results", "cli_ux",
        "closed_streams_and_damaged_files", "compare_gate",
    ],
    "doctor": ["doctor", "doctor_intervals", "doctor_probe", "doctor_traces"],
    "survey": ["survey_duplicate_rank", "survey_parts", "survey_torchrun", "survey_verdicts"],
    "recipes": ["recipes"],
    "project": [
        "bench_evidence", "bench_transfer", "untrusted_inputs", "benchmarks_readme", "declared_imports",
        "environment", "import_graph", "layout", "notebooks", "prose_sentences", "public_api",
        "readme", "sizes_binary", "text_follows_data", "wheel",
    ],
}
FOLDER = {f"test_{stem}": folder for folder, stems in GROUPS.items() for stem in stems}


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    keep = []
    for name in out.stdout.splitlines():
        p = ROOT / name
        if p.suffix in {".ipynb", ".gz", ".png", ".xlsx", ".parquet"} or not p.is_file():
            continue
        try:
            p.read_text()
        except UnicodeDecodeError:
            continue
        keep.append(p)
    return keep


def deeper(text: str) -> str:
    """``Path(__file__)`` walks of a file moved from tests/ to tests/<folder>/."""
    text = text.replace("Path(__file__).resolve().parent.parent", "Path(__file__).resolve().parents[2]")
    text = re.sub(r"Path\(__file__\)\.resolve\(\)\.parents\[1\]", "Path(__file__).resolve().parents[2]", text)
    # tests/data and other tests/ neighbours: one more level up.
    text = re.sub(
        r"Path\(__file__\)\.resolve\(\)\.parent(?![.\w\[])", "Path(__file__).resolve().parents[1]", text
    )
    return text


def main() -> None:
    moved = []
    for stem, folder in sorted(FOLDER.items()):
        src = ROOT / "tests" / f"{stem}.py"
        dst = ROOT / "tests" / folder / f"{stem}.py"
        if src.exists():
            dst.parent.mkdir(exist_ok=True)
            subprocess.run(["git", "mv", str(src), str(dst)], cwd=ROOT, check=True)
            dst.write_text(deeper(dst.read_text()))
            moved.append(stem)
    left = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    names = "|".join(sorted(FOLDER, key=len, reverse=True))
    path_re = re.compile(rf"\btests/({names})\.py")
    mod_re = re.compile(rf"\btests\.({names})\b")
    for p in tracked_text_files():
        text = p.read_text()
        new = path_re.sub(lambda m: f"tests/{FOLDER[m.group(1)]}/{m.group(1)}.py", text)
        new = mod_re.sub(lambda m: f"tests.{FOLDER[m.group(1)]}.{m.group(1)}", new)
        if p == ROOT / "tests" / "conftest.py":
            new = re.sub(
                rf'^(\s+)"({names})\.py": \{{',
                lambda m: f'{m.group(1)}"{FOLDER[m.group(2)]}/{m.group(2)}.py": {{',
                new,
                flags=re.M,
            )
        if new != text:
            p.write_text(new)
    print(f"moved {len(moved)} files; left at tests/ top: {left}")


if __name__ == "__main__":
    main()
