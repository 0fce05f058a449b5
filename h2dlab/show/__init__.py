"""Showing: the figures (they draw what findings/ computed), the rendered report, the
Excel workbook and the interactive explorer.
"""
