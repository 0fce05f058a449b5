"""The fleet survey (``h2dlab survey``): every GPU of every node measured under the
launcher the fleet already uses, one table for the fleet, and the sick GPUs named with
the evidence (see ``h2dlab.cli.survey`` for the command, ``rank`` for one rank's part, ``fleet``
for rank 0's table, ``verdicts`` for the flags, ``show`` for the figure and the page)."""

from h2dlab.survey.launch import Place, place_from_env
from h2dlab.survey.show import plot_metric, report_html, source_line, summary_line
from h2dlab.survey.verdicts import FLAGS, gpu_table, judge, metric_columns

__all__ = [
    "FLAGS",
    "Place",
    "gpu_table",
    "judge",
    "metric_columns",
    "place_from_env",
    "plot_metric",
    "report_html",
    "source_line",
    "summary_line",
]
