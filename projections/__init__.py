"""hookledger read side: projections of the notification log into read models.

Every projection can be dropped and rebuilt from position 0. ``projections`` imports
``ledger``; it never imports ``api`` or starlette.
"""
