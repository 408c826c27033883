"""hookledger write side: sources, privacy, the Session aggregate and the Ledger application.

Nothing here imports starlette, duckdb or the ``projections``/``api`` packages.
"""
