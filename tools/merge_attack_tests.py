"""Merge the attack-pass test files (tests/test_attack*.py, named by round) into the feature
test files whose behaviour each test guards (issue 29, item 5).

Run once from the repository root after tools/move_tests.py: ``python tools/merge_attack_tests.py``.
Each test (with its decorators and comments) is appended, unchanged, to its feature file;
a helper, fixture or constant travels with the tests listed after it in :data:`TARGET`; the
attack file's imports are added to the feature file (``ruff check --fix`` then sorts them and
drops the unused ones); the test's name in the ``SLOW`` list of tests/conftest.py follows it;
a test whose name the feature file already has is renamed (:data:`RENAME`). The attack files
are then removed.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from move_tests import ROOT, deeper

#: attack file -> [(top-level names, feature file under tests/)], names in file order.
TARGET = {
    "test_attack.py": [
        (["place", "CASES", "test_cli_refuses_in_one_line"], "cli/test_bad_input.py"),
        (["test_record_on_cpu_plans_only_strategies_a_cpu_runs"], "recording/test_record_plan.py"),
        (["test_an_interrupted_batch_resumes_to_the_whole_plan"], "measure/test_batch.py"),
        (["test_duplex_takes_force_and_names_it"], "measure/test_duplex.py"),
        (["test_resume_on_a_damaged_table_is_one_line"], "measure/test_recorder_safety.py"),
        (
            [
                "_recording",
                "RECORDING_CASES",
                "test_resume_of_a_damaged_recording_is_one_line",
                "test_record_folder_mistakes_are_one_line",
                "test_a_recording_whose_table_env_is_damaged_fails_with_its_own_reason",
            ],
            "recording/test_record.py",
        ),
        (["test_a_failed_notebook_is_named_without_terminal_colours"], "show/test_report.py"),
        (["test_a_bad_commit_variable_is_one_warning_line_once"], "recording/test_env.py"),
        (["test_a_timeline_given_as_a_table_is_named_a_timeline"], "cli/test_bad_input.py"),
        (["test_report_live_without_cuda_names_the_option_given"], "recording/test_live_errors.py"),
        (["test_an_inherited_data_variable_is_checked_before_any_notebook"], "show/test_record_report.py"),
        (
            [
                "test_a_runs_variable_that_names_a_file_is_named",
                "test_a_runs_folder_that_cannot_be_made_names_the_variable",
            ],
            "recording/test_datasets.py",
        ),
        (["test_forum_on_a_device_torch_cannot_read_is_one_line"], "cli/test_bad_input.py"),
        (
            ["test_live_mode_refuses_a_runs_variable_naming_a_file_before_recording"],
            "recording/test_live_errors.py",
        ),
    ],
    "test_attack10.py": [
        (
            [
                "DATA",
                "two_runs",
                "test_explain_out_refuses_runs_with_their_own_env_json",
                "test_explain_out_of_one_run_keeps_its_own_env_json",
                "test_explain_out_of_a_one_run_dataset_still_works",
                "test_explain_out_keeps_an_existing_env_json_without_force",
                "_d2h_with",
                "_explain_json",
                "test_explain_says_how_many_rows_a_zero_time_left_out",
                "test_explain_of_a_whole_table_checks_every_timed_row",
                "test_explain_says_no_line_was_fitted_to_copies_of_one_size",
                "test_explain_with_no_copy_it_can_check_exits_2_like_compare",
            ],
            "cli/test_cli_ux.py",
        ),
        (
            [
                "DATA",
                "test_a_busiest_thread_with_control_characters_is_refused",
                "test_real_thread_names_pass",
            ],
            "recording/test_validate.py",
        ),
        (["_catches_sigterm", "_terminated", "test_sigterm_exits_130_with_one_line"], "cli/test_cli.py"),
        (
            [
                "test_compare_refuses_a_strategy_the_runs_lack",
                "test_compare_refuses_a_size_the_runs_lack",
                "test_compare_with_known_names_and_sizes_still_shows_them",
            ],
            "cli/test_cli_compare.py",
        ),
        (["test_a_recording_with_an_empty_kind_names_its_kinds"], "recording/test_recording_detection.py"),
        (
            ["DATA", "test_a_schema_version_that_is_no_whole_number_is_a_damaged_env_json"],
            "recording/test_env.py",
        ),
    ],
    "test_attack11.py": [
        (["test_the_resume_line_after_a_forced_run_can_be_run_as_printed"], "cli/test_cli.py"),
        (
            ["test_batch_refuses_a_repeated_method_or_an_empty_count_before_measuring"],
            "measure/test_batch.py",
        ),
        (["test_without_cuda_overlap_and_duplex_name_their_recorded_data"], "cli/test_cli_ux.py"),
        (
            [
                "_h2dlab",
                "test_an_ascii_terminal_gets_the_table_not_a_traceback",
                "test_a_utf8_table_reads_under_an_ascii_locale",
            ],
            "cli/test_closed_streams_and_damaged_files.py",
        ),
        (["test_explain_and_compare_say_when_a_table_was_stopped_early"], "cli/test_cli_ux.py"),
        (
            [
                "test_a_blank_or_invisible_strategy_name_is_refused",
                "test_a_time_column_stored_as_a_time_span_or_date_is_refused",
            ],
            "recording/test_validate.py",
        ),
        (
            [
                "test_a_ctrl_c_while_the_kit_imports_ends_in_one_line",
                "test_the_command_enters_through_the_guarded_entry_point",
            ],
            "cli/test_closed_streams_and_damaged_files.py",
        ),
        (
            ["test_a_file_of_two_runs_names_each_by_its_run_id_and_compare_refuses_a_run_twice"],
            "cli/test_cli_compare.py",
        ),
        (["test_strategies_refuses_cpu_with_an_index_as_measure_does"], "cli/test_cli_ux.py"),
        (["test_the_resume_line_drops_an_abbreviated_force_too"], "cli/test_cli.py"),
        (["test_the_stopped_note_speaks_only_for_the_run_its_env_names"], "cli/test_cli_ux.py"),
        (["test_emoji_joined_by_zwj_pass_and_line_separators_do_not"], "recording/test_validate.py"),
    ],
    "test_attack9.py": [
        (
            [
                "sweep",
                "test_speed_findings_on_a_table_with_no_timed_copy_say_so",
                "test_small_copy_floor_refuses_what_is_no_table",
            ],
            "findings/test_findings.py",
        ),
    ],
}
#: attack file -> {old name: new name}: names its feature file has already; every use in the
#: moved code is renamed.
RENAME = {
    "test_attack.py": {
        "place": "hostile_place",
        "test_cli_refuses_in_one_line": "test_cli_refuses_more_hostile_command_lines_in_one_line",
    },
    "test_attack11.py": {"_h2dlab": "_h2dlab_env"},
}


def segments(path: Path) -> tuple[str, dict[str, str]]:
    """The import block and each top-level definition's source (decorators and the comment
    lines just above it included)."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    imports, parts = [], {}
    for node in tree.body:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        while start > 0 and lines[start - 1].lstrip().startswith("#"):
            start -= 1
        src = "".join(lines[start : node.end_lineno])
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(src)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            parts[node.name] = src
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            parts[target.id] = src
    return "".join(imports), parts


def add_imports(text: str, imports: str) -> str:
    """``imports`` after the last top-level import of ``text``."""
    tree = ast.parse(text)
    last = max(n.end_lineno for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))
    lines = text.splitlines(keepends=True)
    return "".join(lines[:last]) + imports + "".join(lines[last:])


def slow_move(conftest: str, name: str, new: str, src: str, dst: str) -> str:
    """Move ``name`` from SLOW[src] to SLOW[dst] (as ``new``) in the conftest text."""
    block = re.search(rf'^    "{re.escape(src)}": \{{\n(.*?)^    \}},\n', conftest, re.M | re.S)
    line = f'        "{name}",\n'
    if block is None or line not in block.group(1):
        return conftest
    body = block.group(1).replace(line, "", 1)
    conftest = conftest[: block.start(1)] + body + conftest[block.end(1) :]
    one = re.search(rf'^    "{re.escape(dst)}": \{{(".*")\}},\n', conftest, re.M)
    many = re.search(rf'^    "{re.escape(dst)}": \{{\n', conftest, re.M)
    if one:
        return conftest[: one.start(1)] + f'{one.group(1)}, "{new}"' + conftest[one.end(1) :]
    if many:
        return conftest[: many.end()] + f'        "{new}",\n' + conftest[many.end() :]
    end = conftest.index("\n}\n#: Fixtures that make a test slow")
    return conftest[:end] + f'\n    "{dst}": {{\n        "{new}",\n    }},' + conftest[end:]


def main() -> None:
    conftest_path = ROOT / "tests" / "conftest.py"
    for attack, groups in TARGET.items():
        path = ROOT / "tests" / attack
        if not path.exists():
            continue
        imports, parts = segments(path)
        listed = [n for names, _ in groups for n in names]
        assert set(listed) == set(parts), (attack, set(parts) ^ set(listed))  # a constant may go twice
        for names, feature in groups:
            dst = ROOT / "tests" / feature
            text = add_imports(dst.read_text(), imports)
            renames = RENAME.get(attack, {})
            for name in names:
                src = deeper(parts[name])
                for old, new in renames.items():
                    src = re.sub(rf"\b{old}\b", new, src)
                text = text.rstrip("\n") + "\n\n\n" + src.rstrip("\n") + "\n"
                conftest = conftest_path.read_text()
                conftest_path.write_text(slow_move(conftest, name, renames.get(name, name), attack, feature))
            dst.write_text(text)
        subprocess.run(["git", "rm", "-qf", str(path)], cwd=ROOT, check=True)
    conftest = conftest_path.read_text()
    # the emptied SLOW entries of the attack files
    conftest = re.sub(r'^    "test_attack\d*\.py": \{\n    \},\n', "", conftest, flags=re.M)
    conftest_path.write_text(conftest)


if __name__ == "__main__":
    main()
