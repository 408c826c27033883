"""Launcher of the hook hot path: ``python -S /abs/api/hot_path/run.py <agent> <data dir>``.

It imports :mod:`hook_fast` from this directory (first on ``sys.path``) so the compiled
bytecode in ``__pycache__`` is reused (``install-hooks`` writes it): a script run as
``__main__`` is compiled again on every call."""

import sys

from hook_fast import main

sys.exit(main(sys.argv))
