import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("MPLBACKEND", "Agg")

#: The slow tier, left out of ``make test-fast`` (``make test`` runs everything): per test
#: file, the tests that start a process (the command in a subprocess, a second Python) or
#: took 1.5 s or more in ``pytest --durations=0`` on the 2-core machine under a load of
#: about 7 (session 29). A test is fast unless it is listed here, marked
#: ``@pytest.mark.slow`` itself, or uses a fixture in :data:`SLOW_FIXTURES`.
SLOW = {
    "test_analysis.py": {
        "test_advise_h200",
    },
    "test_attack.py": {
        "test_a_recording_whose_table_env_is_damaged_fails_with_its_own_reason",
    },
    "test_attack11.py": {
        "test_a_ctrl_c_while_the_kit_imports_ends_in_one_line",
    },
    "test_bad_input.py": {
        "test_ctrl_c_while_the_command_starts_is_exit_130_without_a_traceback",
    },
    "test_batch.py": {
        "test_cli_batch_and_its_mistakes",
    },
    "test_cli.py": {
        "test_a_bug_keeps_its_traceback",
        "test_cuda_missing_is_one_line",
        "test_datasets_command_lists_all",
        "test_env_command_is_json",
        "test_explain_bad_inputs",
        "test_explain_writes_annotated_table",
        "test_gpus_refuses_resume",
        "test_gpus_run_honours_options_and_prints_the_stopped_summary",
        "test_interrupt_keeps_rows_and_resume_completes",
        "test_live_mode_without_cuda",
        "test_measure_bad_input",
        "test_measure_cpu_writes_all_columns",
        "test_measure_pause_is_recorded_in_the_spec_and_left_out_without_it",
        "test_output_extension",
        "test_output_folder_missing",
        "test_output_folder_not_writable",
        "test_output_folder_refusing_writes",
        "test_resume_with_other_options_is_refused",
        "test_resume_without_a_run",
        "test_unknown_device",
    },
    "test_cli_compare.py": {
        "test_compare_baseline_and_refusals",
        "test_compare_json_matches_pandas",
        "test_compare_several_runs_adds_the_runs_against_the_first",
        "test_compare_table_reads_at_a_glance",
    },
    "test_cli_ux.py": {
        "test_a_kind_of_the_bundled_recording_is_a_run_name",
        "test_building_the_parser_imports_no_torch",
        "test_datasets_json",
        "test_exit_codes",
        "test_explain_h200_sweep_flags_the_pinned_copies",
        "test_explain_missing_file_and_annotated_folder",
        "test_explain_text_names_runs_warns_of_poor_fits_and_groups_stretches",
        "test_explain_tiny_run_says_n_a_not_nan",
        "test_help_states_the_exit_codes_and_the_gpu_commands",
        "test_make_test_gpu_fails_plainly_without_cuda",
        "test_measure_refuses_a_cuda_strategy_on_cpu_up_front",
        "test_missing_cuda_is_a_failure_of_the_machine_not_of_the_command_line",
        "test_no_command_is_a_usage_error_pointing_at_help",
        "test_strategies_lists_each_with_what_it_times_and_whether_it_runs_here",
        "test_version_and_python_dash_m",
    },
    "test_concurrent.py": {
        "test_every_spec_option_reaches_every_process",
    },
    "test_duplex.py": {
        "test_cli_duplex_without_cuda_is_one_line",
    },
    "test_explore.py": {
        "test_one_run_per_timeline_and_headed_tables",
    },
    "test_gc_steady.py": {
        "test_sweep_and_batch_time_every_copy_with_the_heap_frozen",
    },
    "test_idle_machines.py": {
        "test_explain_header_names_every_setup_of_the_runs",
    },
    "test_idle_robust.py": {
        "test_a_damaged_idle_kind_leaves_the_other_kinds_readable",
        "test_a_recording_json_that_is_not_an_object_reads_as_none",
        "test_a_table_whose_env_lacks_its_machine_gets_no_calibration",
        "test_both_readers_agree_on_any_json_value",
        "test_only_cuda_idle_runs_of_the_tables_machine_calibrate",
    },
    "test_idle_wake_gaps.py": {
        "test_lacks_gives_the_reason_idle_runs_are_missing",
    },
    "test_lab.py": {
        "test_lab_has_the_h2dlab_kernel_registered",
    },
    "test_layout.py": {
        "test_module_imports_first_in_a_fresh_interpreter",
    },
    "test_measure.py": {
        "test_concurrent_two_processes_on_cpu",
        "test_cuda_fault_stops_the_sweep_and_keeps_the_rows",
    },
    "test_out_guard.py": {
        "test_beside_the_recording_or_elsewhere_is_written",
    },
    "test_outliers_crowded.py": {
        "test_host_crowded_precision_recall_synthetic",
    },
    "test_outliers_episodes.py": {
        "test_episodes_do_not_depend_on_the_tables_row_order",
    },
    "test_outliers_parallel.py": {
        "test_host_parallel_precision_recall_synthetic",
        "test_schema3_table_never_host_parallel_synthetic",
    },
    "test_outliers_pinned.py": {
        "test_explain_flags_pinned",
    },
    "test_outliers_sched.py": {
        "test_preempted_exactly_when_the_wait_covers_half_the_extra_where_it_counts",
        "test_ruled_out_on_recorded_tables_matches_each_evidence",
        "test_ruled_out_shows_the_host_clock_that_time_in_the_call_splits",
        "test_schema3_cause_precision_recall_synthetic",
        "test_schema4_other_threads_reads_each_threads_clock_and_names_the_busiest",
        "test_schema4_ruled_out_other_threads_on_h200_omp",
    },
    "test_outliers_synthetic.py": {
        "test_episode_search_on_given_residuals",
        "test_new_cause_precision_recall_synthetic",
        "test_pelt_l2_finds_the_least_cost_segmentation",
        "test_pelt_l2_is_never_costlier_than_ruptures",
        "test_pelt_l2_is_optimal_on_short_integer_series",
        "test_summary_counts_flagged_rows_per_run_strategy_and_cause",
    },
    "test_outliers_wake.py": {
        "test_gpu_wake_precision_recall_synthetic",
        "test_idle_gap_is_its_definition_in_any_row_order",
        "test_near_misses_of_a_wake_up_stay_unexplained_and_say_why",
        "test_tables_without_start_times_never_say_gpu_wake",
    },
    "test_plots.py": {
        "test_compare_machines_wide_and_definitions_are_the_table_and_its_metrics",
        "test_machines_draws_one_bar_per_machine_and_gbps_row",
        "test_notebook_figures_have_titles_outside_legends_and_apart_labels",
        "test_plot_into_given_axes",
        "test_the_bandwidth_figure_draws_the_numbers_the_sentence_states",
    },
    "test_readme.py": {
        "test_readme_found_table_matches_the_data",
    },
    "test_record.py": {
        "test_a_failed_experiment_does_not_stop_the_others",
        "test_cpu_recording_interrupted_then_resumed_exactly",
    },
    "test_record_compare.py": {
        "test_a_recording_folder_joins_the_references",
        "test_columns_and_machines",
    },
    "test_record_plan.py": {
        "test_data_readme_quotes_the_wide_window_of_the_bundled_recording",
    },
    "test_record_report.py": {
        "test_workbook_reads_the_recording_it_is_given",
    },
    "test_recorded.py": {
        "test_bundled_tables_validate_and_read_as_version_2",
        "test_every_run_names_the_h200_and_its_link",
        "test_forum_runs_three_ascending_one_shuffled",
        "test_new_kinds_of_the_h200_recording_load_by_name",
        "test_sweep_covers_every_strategy_and_size_with_enough_reps",
    },
    "test_recorder.py": {
        "test_a_stopped_sweep_records_the_signal_in_its_env",
        "test_resume_through_sweep_refuses_a_changed_spec_and_finishes_the_same",
    },
    "test_recorder_safety.py": {
        "test_a_later_write_removes_stale_temporaries_of_its_own_output",
        "test_a_partial_file_with_todays_header_is_appended_to_not_rewritten",
        "test_a_run_that_fails_at_once_leaves_the_tables_fingerprint_alone",
        "test_a_second_process_refuses_at_once_naming_the_first",
        "test_an_existing_output_is_kept_unless_forced",
        "test_resume_cuts_a_torn_last_line",
        "test_sigterm_during_the_final_save_leaves_no_temporary",
    },
    "test_report.py": {
        "test_build_shuts_each_kernel_down_and_writes_its_wall_times",
        "test_live_build_times_the_recording_and_hands_it_to_every_kernel",
    },
    "test_report_missing_kinds.py": {
        "test_a_cpu_sweep_counts_as_lacking",
        "test_lacks_names_what_is_missing",
        "test_the_bundled_recording_lacks_nothing_the_notebooks_read",
    },
    "test_report_workbook.py": {
        "test_number_formats_run_names_and_sizes",
        "test_readme_first_says_sheets_units_machine_and_commands",
    },
    "test_session.py": {
        "test_an_idle_kind_loads_where_a_recording_has_it",
        "test_bundled_tables_are_the_recorded_datasets",
    },
    "test_spec_properties.py": {
        "test_resume_after_any_interruption_finishes_the_plan",
    },
    "test_threadstat.py": {
        "test_a_cpu_shared_with_a_busy_process_shows_as_run_delay",
    },
    "test_timing.py": {
        "test_gc_count_counts_collections_started_during_the_copy",
        "test_gc_ms_is_the_time_in_collections_during_the_copy",
    },
    "test_transfer.py": {
        "test_chunk_plan_covers_every_byte_once",
        "test_staging_loop_bytes_match",
    },
    "test_unexplained_share.py": {
        "test_an_unexplained_copy_of_an_old_table_names_the_checks_it_could_not_make",
        "test_the_recordings_before_the_evidence_still_load_and_explain",
        "test_the_unexplained_share_is_what_a_reader_counts",
    },
    "test_validate.py": {
        "test_a_repeated_row_is_refused",
        "test_booleans_accepted_exactly_when_they_are_one",
        "test_one_bad_value_is_refused_at_its_row_and_column",
        "test_save_read_roundtrip_keeps_every_value",
        "test_valid_tables_are_accepted_with_their_values",
    },
    "test_wake_calibration.py": {
        "test_a_gap_under_the_calibrated_threshold_is_not_gpu_wake",
        "test_idle_runs_with_one_pause_attach_no_calibration",
        "test_load_attaches_the_recordings_idle_calibration",
        "test_no_calibration_no_gpu_wake_and_ruled_out_says_so",
    },
    "test_wake_per_run.py": {
        "test_a_mapping_value_that_is_no_calibration_nor_sentence_is_refused",
        "test_a_mapping_without_the_run_says_the_old_words",
        "test_a_run_that_does_not_name_its_machine_says_so",
        "test_a_run_timed_on_the_cpu_gets_no_gpu_wake",
        "test_a_table_of_one_machine_explains_as_with_one_calibration",
        "test_another_machines_sentence_speaks_of_the_idle_runs_that_name_one",
        "test_calibrations_and_shared_refuse_what_is_no_table_or_mapping",
        "test_each_run_gets_its_own_machines_calibration",
        "test_explain_refuses_pauses_no_run_could_take",
        "test_idle_runs_of_two_other_machines_name_the_nearest",
        "test_neighbours_refuses_what_is_no_table",
        "test_the_cli_session_and_one_run_agree",
        "test_the_sentence_names_each_key_that_differs",
        "test_unusable_idle_runs_say_why_not_that_none_were_recorded",
        "test_wake_as_a_mapping_per_run",
    },
    "test_wheel.py": {
        "test_git_commit_only_for_the_kits_own_checkout",
    },
}
#: Fixtures that make a test slow: executing the notebooks, driving a browser.
SLOW_FIXTURES = {"rendered", "browser"}


def pytest_collection_modifyitems(config, items):
    """Mark the slow tier ``slow`` (:data:`SLOW`, :data:`SLOW_FIXTURES`)."""
    for item in items:
        name = getattr(item, "originalname", None) or item.name
        where = item.path.relative_to(ROOT / "tests").as_posix()
        if name in SLOW.get(where, ()) or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _seed_and_close():
    np.random.seed(0)
    yield
    if "matplotlib.pyplot" in sys.modules:
        import matplotlib.pyplot as plt

        plt.close("all")


def run_cli(*args, timeout=300, env=None, cwd=None):
    """Run the h2dlab command in a subprocess; returns CompletedProcess."""
    e = dict(os.environ)
    e.pop("H2DLAB_DEBUG", None)
    if env:
        e.update(env)
    return subprocess.run(
        [sys.executable, "-m", "h2dlab.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=e,
        cwd=cwd or ROOT,
    )


@pytest.fixture
def cli():
    return run_cli


def refused_in_one_line(argv, needles, capsys, folder):
    """Run ``h2dlab argv`` in this process and check the refusal of a user mistake: exit
    code 2, ONE line on stderr naming every needle (case-insensitive), no traceback, and
    nothing added to or removed from ``folder``. Returns that line."""
    from h2dlab import cli

    before = sorted(p.name for p in folder.iterdir())
    try:
        rc = cli.main(argv)
    except SystemExit as exc:  # argparse's own refusals
        rc = exc.code
    out, err = capsys.readouterr()
    assert rc == 2, (rc, err)
    assert "Traceback" not in err + out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for n in needles:
        assert n.lower() in lines[0].lower(), (n, lines[0])
    assert sorted(p.name for p in folder.iterdir()) == before
    return lines[0]


@pytest.fixture(scope="session")
def rendered(tmp_path_factory):
    """Execute the reported notebooks in replay mode and render them, once per session."""
    from h2dlab import report

    out = tmp_path_factory.mktemp("reports")
    old = os.environ.get("H2DLAB_MODE")
    try:
        rc = report.build(outdir=out, mode="replay")
    finally:
        if old is None:
            os.environ.pop("H2DLAB_MODE", None)
        else:
            os.environ["H2DLAB_MODE"] = old
    return rc, out


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium driven by Playwright (never Playwright's own download)."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Chromium is not installed (apt-get install chromium); .ci/run installs it")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()
