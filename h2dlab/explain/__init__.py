"""Explaining a table: the latency fit (overhead + bytes / bandwidth), the detection of
slow copies, and the causes each flagged copy gets, with the calibrations they use.
Imports the table layer only.
"""
