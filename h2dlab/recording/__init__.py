"""The table and where it lives: the schema, reading and writing tables and env.json,
recording folders and the one recording plan, the bundled datasets and sessions.
Reading a table imports no analysis (tests/project/test_import_graph.py).
"""
