"""hookledger entry points: the Starlette service and the ``hookledger`` CLI."""
