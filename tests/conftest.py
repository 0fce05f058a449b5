import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("MPLBACKEND", "Agg")

#: The slow tier, left out of ``make test-fast`` (``make test`` runs everything): per test
#: file, the tests that start a process (the command in a subprocess, a second Python), that
#: took 1.5 s or more in ``pytest --durations=0`` on the 2-core machine under a load of
#: about 7, or (of the rest) 0.3 s or more, setup included, under a load of about 2 (session
#: 29). A test is fast unless it is listed here, marked
#: ``@pytest.mark.slow`` itself, or uses a fixture in :data:`SLOW_FIXTURES`.
SLOW = {
    # Processes of their own (torchrun, the CLI, a recorder), a rendered workbook: the slow tier.
    "survey/test_survey_torchrun.py": {
        "test_a_killed_and_a_hung_rank_cost_their_own_rows_only",
        "test_two_torchrun_agents_of_two_ranks_make_one_table_of_four_ranks",
    },
    "measure/test_workload.py": {"test_cli_writes_the_table_and_refuses_a_bad_shape_in_one_line"},
    "recipes/test_recipes.py": {"test_every_recipe_script_runs_as_pasted_on_a_cpu_only_torch"},
    "show/test_xlsx_formulas.py": {"test_the_report_workbook_writes_no_formula"},
    "recording/test_sighup.py": {"test_sighup_to_record_stops_its_experiment_and_keeps_its_rows"},
    "cli/test_closed_streams_and_damaged_files.py": {
        "test_a_ctrl_c_while_the_kit_imports_ends_in_one_line",
        "test_a_utf8_table_reads_under_an_ascii_locale",
        "test_an_ascii_terminal_gets_the_table_not_a_traceback",
        "test_measure_with_stdout_closed_still_writes_its_table",
        "test_a_closed_stream_is_no_traceback",
    },
    "survey/test_survey_parts.py": {"test_one_process_writes_a_fleet_table_that_the_kit_reads_and_a_page"},
    "doctor/test_doctor.py": {"test_profile_writes_a_trace_of_the_recorded_steps_on_cpu"},
    "explain/test_analysis.py": {
        "test_advice_h200",
        "test_decaying_episode_is_one_episode",
        "test_fit_h200_sweep_bandwidths",
        "test_forum_a100_causes",
        "test_h200_allocator_host_allocs_exactly_where_pin_spiked",
        "test_h200_clean_pinned_reuse_sweep_flags_at_most_one_percent",
        "test_h200_forum_pin_spikes_have_counter_evidence",
        "test_precision_recall_on_synthetic_runs",
    },
    "cli/test_bad_input.py": {
        "test_cli_refuses_more_hostile_command_lines_in_one_line",
        "test_cli_refuses_in_one_line",
        "test_ctrl_c_while_the_command_starts_is_exit_130_without_a_traceback",
        "test_explain_out_writes_its_own_fingerprint",
        "test_library_refuses_with_a_message",
    },
    "measure/test_batch.py": {
        "test_an_interrupted_batch_resumes_to_the_whole_plan",
        "test_a_wrong_batch_copy_is_caught",
        "test_batch_sizes_add_up",
        "test_cli_batch_and_its_mistakes",
        "test_cpu_batch_rows",
    },
    "project/test_bench_evidence.py": {
        "test_explain_reads_a_relative_path_from_where_it_is_run",
        "test_explain_refuses_bad_arguments_before_measuring",
    },
    "project/test_bench_transfer.py": {
        "test_dry_run_writes_every_section",
    },
    "explain/test_causes_stall.py": {
        "test_host_stall_precision_recall_synthetic",
        "test_ruled_out_reads_the_censuses_explain_was_given",
    },
    "transfer/test_chunk_splits.py": {
        "test_chunk_plan_properties_with_each_split",
    },
    "cli/test_cli.py": {
        "test_sigterm_exits_130_with_one_line",
        "test_a_bug_keeps_its_traceback",
        "test_a_usage_error_is_one_line_exit_2",
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
    "cli/test_cli_compare.py": {
        "test_a_file_of_two_runs_names_each_by_its_run_id_and_compare_refuses_a_run_twice",
        "test_compare_with_known_names_and_sizes_still_shows_them",
        "test_compare_refuses_a_size_the_runs_lack",
        "test_compare_refuses_a_strategy_the_runs_lack",
        "test_compare_baseline_and_refusals",
        "test_compare_json_matches_pandas",
        "test_compare_several_runs_adds_the_runs_against_the_first",
        "test_compare_table_reads_at_a_glance",
    },
    "cli/test_cli_ux.py": {
        "test_explain_and_compare_say_when_a_table_was_stopped_early",
        "test_explain_with_no_copy_it_can_check_exits_2_like_compare",
        "test_explain_says_no_line_was_fitted_to_copies_of_one_size",
        "test_explain_of_a_whole_table_checks_every_timed_row",
        "test_explain_says_how_many_rows_a_zero_time_left_out",
        "test_explain_out_keeps_an_existing_env_json_without_force",
        "test_explain_out_of_a_one_run_dataset_still_works",
        "test_explain_out_of_one_run_keeps_its_own_env_json",
        "test_explain_out_refuses_runs_with_their_own_env_json",
        "test_a_bug_exits_1_with_its_traceback",
        "test_a_kind_leaves_out_a_run_stopped_early",
        "test_a_kind_of_the_bundled_recording_is_a_run_name",
        "test_a_recording_folder_with_a_cut_table_names_the_file",
        "test_a_recording_named_like_the_bundled_one_in_the_current_folder",
        "test_a_tilde_the_shell_left_is_the_home_folder",
        "test_building_the_parser_imports_no_torch",
        "test_datasets_json",
        "test_exit_codes",
        "test_explain_h200_sweep_flags_the_pinned_copies",
        "test_explain_json_schema",
        "test_explain_missing_file_and_annotated_folder",
        "test_explain_takes_dataset_colon_run_as_compare_does",
        "test_explain_text_names_runs_warns_of_poor_fits_and_groups_stretches",
        "test_explain_tiny_run_says_n_a_not_nan",
        "test_help_states_the_exit_codes_and_the_gpu_commands",
        "test_make_test_gpu_fails_plainly_without_cuda",
        "test_measure_refuses_a_cuda_strategy_on_cpu_up_front",
        "test_missing_cuda_is_a_failure_of_the_machine_not_of_the_command_line",
        "test_no_command_is_a_usage_error_pointing_at_help",
        "test_recording_names_refused_in_one_line",
        "test_strategies_lists_each_with_what_it_times_and_whether_it_runs_here",
        "test_version_and_python_dash_m",
    },
    "measure/test_concurrent.py": {
        "test_every_spec_option_reaches_every_process",
    },
    "recording/test_datasets.py": {
        "test_a_run_id_of_digits_stays_text",
        "test_a_run_in_two_files_of_a_folder_is_refused",
        "test_bundled_runs_find_their_old_style_env_json",
        "test_csv_cut_mid_row_reads_whole_rows",
        "test_csv_edge_cases_of_the_last_line_and_the_header",
        "test_env_json_is_named_after_the_whole_file_name",
        "test_explain_reads_a_folder_mixing_an_annotated_table_with_a_plain_one",
        "test_forum_a100_matches_published_table",
        "test_load_a_folder_and_a_path_object",
        "test_load_refuses_empty_names_and_the_current_folder",
        "test_old_stem_env_json_is_still_read_for_its_own_run",
        "test_roundtrip",
    },
    "measure/test_directions.py": {
        "test_d2h_sweep_rows_say_d2h_and_bytes_match",
        "test_the_byte_check_catches_a_wrong_d2h_copy",
    },
    "measure/test_duplex.py": {
        "test_cli_duplex_without_cuda_is_one_line",
        "test_duplex_byte_check",
        "test_duplex_rows_on_a_fake_cuda",
    },
    "explain/test_explain_fit.py": {
        "test_a_line_plus_small_noise_is_never_warned",
        "test_h200_idle_warns_exactly_the_runs_whose_median_error_is_above_10_percent",
        "test_h200_sweep_still_warns_staged_whose_large_copies_beat_the_line",
    },
    "show/test_explore.py": {
        "test_one_run_per_timeline_and_headed_tables",
        "test_open_any_run_by_path_or_say_why_not",
        "test_size_range_is_in_binary_units",
    },
    "findings/test_factors.py": {
        "test_machine_reads_env_and_says_what_is_missing",
        "test_unexplained_counts_and_evidence",
    },
    "findings/test_factors_idle.py": {
        "test_a_pause_after_which_every_cell_ran_faster_is_named_as_the_spread",
        "test_idle_pause_figure_draws_the_cells",
    },
    "findings/test_factors_openmp.py": {
        "test_each_run_says_its_policy_in_env_json",
        "test_openmp_wait_counts_recomputed",
        "test_openmp_wait_evidence_of_spinning_and_sleeping_recomputed",
    },
    "findings/test_findings.py": {
        "test_speed_findings_on_a_table_with_no_timed_copy_say_so",
        "test_context_startup_on_the_reruns",
        "test_context_startup_says_mostly_where_a_first_operation_itself_ran_long",
        "test_device_alloc_cost_forum_vs_reused_buffer",
        "test_episodes_a100_and_none_on_h200",
        "test_host_alloc_growth_emptied_each_size_says_every_size_made_a_block",
    },
    "findings/test_findings_advice.py": {
        "test_advice_adds_results_back_and_batches_against_their_own_plain_way",
        "test_advice_rows_are_the_medians",
        "test_bandwidth_peak_and_order",
        "test_memory_kind_at_64_kib_is_not_overhead_only",
        "test_pin_first_pays_says_when_the_first_call_is_scaled",
        "test_size_text",
    },
    "findings/test_findings_transfer.py": {
        "test_duplex_summary_judges_the_largest_size_it_can_compare_and_reads_a_plain_csv_table",
    },
    "measure/test_gc_steady.py": {
        "test_an_error_inside_still_hands_objects_back",
        "test_nested_blocks_leave_it_to_the_outermost_and_a_freeze_from_outside_stays",
        "test_objects_from_before_are_frozen_inside_and_handed_back_after",
        "test_sweep_and_batch_time_every_copy_with_the_heap_frozen",
    },
    "explain/test_hand_made_text.py": {
        "test_text_in_an_evidence_column_reads_as_not_measured",
    },
    "explain/test_host_pace.py": {
        "test_no_stretch_unless_the_loop_and_the_copies_both_slowed",
        "test_pace_episode_precision_recall_synthetic",
    },
    "explain/test_hostile_reads.py": {
        "test_a_pipe_or_folder_named_like_a_table_is_no_table",
        "test_detect_reads_text_booleans_numbers_as_text_and_nan_errors_as_the_table",
        "test_explain_of_a_table_read_with_plain_pandas_flags_what_the_kit_reader_does",
        "test_explain_of_concatenated_tables_with_a_repeated_index_says_how_to_join_them",
    },
    "explain/test_idle_machines.py": {
        "test_explain_header_names_every_setup_of_the_runs",
        "test_idle_runs_of_two_machines_are_not_compared",
        "test_idle_runs_on_the_cpu_are_left_out",
        "test_idle_wake_and_the_calibration_refuse_what_is_no_table",
        "test_one_machines_idle_runs_are_compared",
        "test_runs_that_name_no_machine_or_device_are_still_compared",
        "test_start_times_that_contradict_the_pause_give_no_gap",
    },
    "explain/test_idle_robust.py": {
        "test_a_damaged_idle_kind_is_said_in_each_copys_evidence",
        "test_a_damaged_idle_kind_leaves_the_other_kinds_readable",
        "test_a_recording_json_that_is_not_an_object_reads_as_none",
        "test_a_strategy_lacking_a_pause_is_left_out_of_the_calibration",
        "test_a_table_whose_env_lacks_its_machine_gets_no_calibration",
        "test_both_readers_agree_on_any_json_value",
        "test_only_cuda_idle_runs_of_the_tables_machine_calibrate",
    },
    "explain/test_idle_wake_gaps.py": {
        "test_idle_pause_figure_with_nothing_to_draw_says_why",
        "test_lacks_gives_the_reason_idle_runs_are_missing",
    },
    "show/test_lab.py": {
        "test_lab_has_the_h2dlab_kernel_registered",
    },
    "project/test_layout.py": {
        "test_module_imports_first_in_a_fresh_interpreter",
        "test_no_module_imports_a_private_name_from_another",
    },
    "explain/test_linefit.py": {
        "test_same_minimum_as_least_squares",
    },
    "recording/test_live_errors.py": {
        "test_a_refused_resume_is_a_usage_error_with_the_recorders_line",
        "test_report_live_says_it_in_one_line",
    },
    "measure/test_measure.py": {
        "test_a_bug_in_a_strategy_propagates",
        "test_concurrent_two_processes_on_cpu",
        "test_cpu_sweep_rows_with_fake_clock",
        "test_cuda_fault_stops_the_sweep_and_keeps_the_rows",
        "test_interleaved_cpu_sweep",
        "test_oom_is_a_row_and_the_sweep_goes_on",
        "test_other_runtime_error_is_a_row",
    },
    "explain/test_model.py": {
        "test_advice_ways_and_upfront_cost",
        "test_advice_first_call_uses_cold_pin_rows",
        "test_advice_smallest_sizes_and_anchored_messages",
        "test_advice_never_says_same_where_a_time_is_missing",
        "test_concurrency_scaling",
        "test_fit_confidence_interval_is_the_bootstrap_percentile_interval",
        "test_fit_skips_one_size_groups_and_sorts_groups",
    },
    "recording/test_out_guard.py": {
        "test_beside_the_recording_or_elsewhere_is_written",
    },
    "explain/test_outliers_crowded.py": {
        "test_host_crowded_precision_recall_synthetic",
        "test_lookalikes_are_flagged_but_not_host_crowded_synthetic",
        "test_schema3_table_never_host_crowded_synthetic",
    },
    "explain/test_outliers_episodes.py": {
        "test_episodes_do_not_depend_on_the_tables_row_order",
        "test_isolated_spike_is_explained_as_without_the_pass",
        "test_machine_wide_slow_period_is_an_episode_across_strategies",
        "test_precision_recall_of_periods_against_isolated_spikes",
        "test_rows_explained_by_a_specific_cause_are_neutral_across_curves",
    },
    "explain/test_outliers_parallel.py": {
        "test_h200_omp_two_staged_copies_are_host_parallel",
        "test_host_parallel_precision_recall_synthetic",
        "test_lookalikes_are_flagged_but_not_host_parallel_synthetic",
        "test_schema3_table_never_host_parallel_synthetic",
    },
    "explain/test_outliers_pinned.py": {
        "test_explain_flags_pinned",
    },
    "explain/test_outliers_sched.py": {
        "test_a_v2_table_keeps_the_cpu_share_rule",
        "test_h200_batch_other_threads_at_their_usual_rate_are_not_the_cause",
        "test_h200_sweep_slow_pin_then_copy_with_busy_worker_threads_is_other_threads",
        "test_near_misses_stay_unexplained_and_say_what_was_ruled_out",
        "test_neighbours_typical_scheduler_shares",
        "test_no_wait_and_no_sleep_beyond_the_usual_is_never_a_scheduler_cause",
        "test_other_threads_compares_cpus_worth_not_amounts",
        "test_preempted_exactly_when_the_wait_covers_half_the_extra_where_it_counts",
        "test_ruled_out_on_recorded_tables_matches_each_evidence",
        "test_ruled_out_shows_the_host_clock_that_time_in_the_call_splits",
        "test_schema3_cause_precision_recall_synthetic",
        "test_schema4_other_threads_reads_each_threads_clock_and_names_the_busiest",
        "test_schema4_ruled_out_other_threads_on_h200_omp",
    },
    "explain/test_outliers_synthetic.py": {
        "test_detect_four_sizes_copied_once_get_a_curve",
        "test_detect_three_timed_rows_get_their_median_and_a_short_group_is_skipped",
        "test_detect_thresholds_are_strict",
        "test_device_alloc_cause_synthetic",
        "test_episode_search_on_given_residuals",
        "test_growth_inferred_only_for_a_new_block_without_counters",
        "test_host_alloc_growth_quotes_the_page_faults_where_measured",
        "test_new_cause_precision_recall_synthetic",
        "test_pelt_l2_finds_the_least_cost_segmentation",
        "test_pelt_l2_is_never_costlier_than_ruptures",
        "test_pelt_l2_is_optimal_on_short_integer_series",
        "test_preemption_needs_a_host_bound_strategy",
        "test_summary_counts_flagged_rows_per_run_strategy_and_cause",
        "test_unexplained_says_what_was_ruled_out",
        "test_unmeasured_columns_give_no_new_cause",
    },
    "explain/test_outliers_wake.py": {
        "test_an_episode_wins_over_gpu_wake",
        "test_evidence_causes_keep_their_precision_recall_after_long_gaps",
        "test_explain_says_how_much_of_the_gap_was_the_runs_pause",
        "test_gpu_wake_precision_recall_synthetic",
        "test_idle_gap_is_its_definition_in_any_row_order",
        "test_near_misses_of_a_wake_up_stay_unexplained_and_say_why",
        "test_tables_without_start_times_never_say_gpu_wake",
    },
    "show/test_plots.py": {
        "test_advice_bars_colour_each_case",
        "test_allocator_growth_marks_new_blocks",
        "test_annotate_labels_at_most_n_and_each_cause_first",
        "test_bandwidth_peak_and_pcie_lines",
        "test_compare_machines_wide_and_definitions_are_the_table_and_its_metrics",
        "test_latency_draws_each_strategy_and_fit",
        "test_machines_draws_one_bar_per_machine_and_gbps_row",
        "test_notebook_figures_have_titles_outside_legends_and_apart_labels",
        "test_plot_into_given_axes",
        "test_the_bandwidth_figure_draws_the_numbers_the_sentence_states",
        "test_timeline_shades_each_episode_and_marks_causes",
    },
    "project/test_readme.py": {
        "test_readme_found_table_has_no_unchecked_number",
        "test_readme_found_table_matches_the_data",
    },
    "recording/test_record.py": {
        "test_a_recording_whose_table_env_is_damaged_fails_with_its_own_reason",
        "test_a_failed_experiment_does_not_stop_the_others",
        "test_cpu_recording_interrupted_then_resumed_exactly",
    },
    "recording/test_record_compare.py": {
        "test_a_recording_folder_joins_the_references",
        "test_columns_and_machines",
        "test_h200_bandwidth_at_1gib_is_the_median_copy",
    },
    "recording/test_record_plan.py": {
        "test_data_readme_quotes_the_wide_window_of_the_bundled_recording",
    },
    "show/test_record_report.py": {
        "test_workbook_reads_the_recording_it_is_given",
    },
    "recording/test_recorded.py": {
        "test_bundled_tables_validate_and_read_as_version_2",
        "test_every_run_names_the_h200_and_its_link",
        "test_forum_runs_three_ascending_one_shuffled",
        "test_new_kinds_of_the_h200_recording_load_by_name",
        "test_sweep_covers_every_strategy_and_size_with_enough_reps",
    },
    "measure/test_recorder.py": {
        "test_a_stopped_sweep_records_the_signal_in_its_env",
        "test_finish_sorts_by_order_keeping_the_written_order_of_ties",
        "test_resume_refuses_rows_that_do_not_follow_the_plan_even_with_the_same_spec",
        "test_resume_through_sweep_refuses_a_changed_spec_and_finishes_the_same",
        "test_row_writer_alone_finishes_and_closes_once",
    },
    "measure/test_recorder_safety.py": {
        "test_resume_on_a_damaged_table_is_one_line",
        "test_a_later_write_removes_stale_temporaries_of_its_own_output",
        "test_a_partial_file_with_todays_header_is_appended_to_not_rewritten",
        "test_a_resume_continues_the_clock_one_second_after_the_first_parts_last_row",
        "test_a_resumed_run_leaves_no_file_descriptor_open",
        "test_a_run_that_fails_at_once_leaves_the_tables_fingerprint_alone",
        "test_a_second_process_refuses_at_once_naming_the_first",
        "test_an_existing_output_is_kept_unless_forced",
        "test_resume_cuts_a_torn_last_line",
        "test_resume_rewrites_a_v1_partial_with_the_v2_header",
        "test_resuming_a_killed_run_compares_the_spec_beside_its_partial_file",
        "test_resuming_a_run_whose_rows_cover_the_plan_keeps_them_all",
        "test_sigterm_during_the_final_save_leaves_no_temporary",
        "test_the_env_is_taken_without_the_gpu_at_the_start_and_as_asked_at_the_finish",
        "test_the_partial_file_of_a_killed_run_is_kept_unless_forced",
    },
    "recording/test_recording_detection.py": {
        "test_every_reader_gives_one_answer",
        "test_kind_folders",
        "test_messages_name_what_the_folder_holds",
    },
    "show/test_report.py": {
        "test_a_failed_notebook_is_named_without_terminal_colours",
        "test_build_shuts_each_kernel_down_and_writes_its_wall_times",
        "test_live_build_times_the_recording_and_hands_it_to_every_kernel",
    },
    "show/test_report_html.py": {
        "test_no_external_scripts_or_styles",
    },
    "show/test_report_missing_kinds.py": {
        "test_a_cpu_sweep_counts_as_lacking",
        "test_lacks_names_what_is_missing",
        "test_the_bundled_recording_lacks_nothing_the_notebooks_read",
    },
    "show/test_report_workbook.py": {
        "test_every_sheet_is_headed_frozen_filtered_and_sized",
        "test_fit_sheet_values_are_the_models",
        "test_number_formats_run_names_and_sizes",
        "test_readme_first_says_sheets_units_machine_and_commands",
    },
    "recording/test_session.py": {
        "test_an_idle_kind_loads_where_a_recording_has_it",
        "test_bundled_tables_are_the_recorded_datasets",
        "test_folder_recording_reads_its_layout",
    },
    "measure/test_spec.py": {
        "test_recorded_spec_reads_back",
        "test_sweep_spec_round_trips_through_json",
    },
    "measure/test_spec_properties.py": {
        "test_a_spec_is_valid_exactly_when_each_field_is",
        "test_any_text_is_a_positive_size_or_a_value_error",
        "test_decimal_sizes_are_exact_or_refused",
        "test_resume_after_any_interruption_finishes_the_plan",
        "test_whole_sizes_read_back_exactly",
    },
    "measure/test_threadstat.py": {
        "test_a_cpu_shared_with_a_busy_process_shows_as_run_delay",
        "test_stat_field_39_is_found_whatever_the_command_name",
    },
    "measure/test_threadstat_others.py": {
        "test_waits_since_sees_workers_that_outnumber_the_cpus",
    },
    "measure/test_timing.py": {
        "test_gc_count_counts_collections_started_during_the_copy",
        "test_gc_ms_is_the_time_in_collections_during_the_copy",
    },
    "transfer/test_transfer.py": {
        "test_bad_option_is_refused_whatever_the_size",
        "test_chunk_plan_covers_every_byte_once",
        "test_staging_loop_bytes_match",
        "test_unused_stager_is_collected_and_released",
    },
    "explain/test_unexplained_share.py": {
        "test_an_unexplained_copy_of_an_old_table_names_the_checks_it_could_not_make",
        "test_host_parallel_finding_without_such_copies",
        "test_the_forum_re_runs_meet_the_target_and_the_sweep_does_not",
        "test_the_recordings_before_the_evidence_still_load_and_explain",
        "test_the_unexplained_share_is_what_a_reader_counts",
    },
    "recording/test_validate.py": {
        "test_a_time_column_stored_as_a_time_span_or_date_is_refused",
        "test_a_blank_or_invisible_strategy_name_is_refused",
        "test_a_busiest_thread_with_control_characters_is_refused",
        "test_a_repeated_row_is_refused",
        "test_booleans_accepted_exactly_when_they_are_one",
        "test_one_bad_value_is_refused_at_its_row_and_column",
        "test_same_copy_on_two_gpus_or_directions_is_not_a_duplicate",
        "test_save_read_roundtrip_keeps_every_value",
        "test_v2_values_roundtrip",
        "test_valid_tables_are_accepted_with_their_values",
    },
    "explain/test_wake_calibration.py": {
        "test_a_calibration_without_a_wake_up_names_no_gpu_wake",
        "test_a_gap_under_the_calibrated_threshold_is_not_gpu_wake",
        "test_idle_runs_with_one_pause_attach_no_calibration",
        "test_load_attaches_the_recordings_idle_calibration",
        "test_no_calibration_no_gpu_wake_and_ruled_out_says_so",
        "test_reading_a_table_calibrates_nothing_and_explain_calibrates_it_the_same",
    },
    "explain/test_wake_per_run.py": {
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
    "project/test_wheel.py": {
        "test_git_commit_only_for_the_kits_own_checkout",
    },
    "recording/test_env.py": {
        "test_a_bad_commit_variable_is_one_warning_line_once",
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
        [sys.executable, "-m", "h2dlab.cli.main", *args],
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
    from h2dlab.cli import main as cli

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


def once_per_run(tmp_path_factory, name, build):
    """``build(folder)`` into a fresh folder once per test run and return ``(its result,
    folder)``. Under pytest-xdist (``make test``) the first worker to ask builds it in the
    temporary folder all workers share, holding a lock; the others wait and read it."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        out = tmp_path_factory.mktemp(name)
        return build(out), out
    import fcntl
    import json

    shared = tmp_path_factory.getbasetemp().parent
    out, done = shared / name, shared / f"{name}.json"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return json.loads(done.read_text()), out
        out.mkdir(exist_ok=True)
        result = build(out)
        done.write_text(json.dumps(result))
    return result, out


@pytest.fixture(scope="session")
def rendered(tmp_path_factory):
    """Execute the reported notebooks in replay mode and render them, once per session (once
    per run under pytest-xdist: :func:`once_per_run`)."""
    from h2dlab.show import report

    def build(out):
        old = os.environ.get("H2DLAB_MODE")
        try:
            return report.build(outdir=out, mode="replay")
        finally:
            if old is None:
                os.environ.pop("H2DLAB_MODE", None)
            else:
                os.environ["H2DLAB_MODE"] = old

    return once_per_run(tmp_path_factory, "reports", build)


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
