"""Every sentence the notebooks, the README and the workbook state, and the advice,
computed from tables (explain/'s fits and causes), each a tested function.
"""
