"""The hook hot path: standard-library modules run with ``python -S`` (see ``hook_fast``).

This directory holds nothing else, because running ``run.py`` puts it first on
``sys.path``: a sibling module could otherwise shadow a standard-library one."""
