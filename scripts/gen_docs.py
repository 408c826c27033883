"""Regenerate the generated references: docs/events.md and docs/cli.md.

    python scripts/gen_docs.py          # write both files
    python scripts/gen_docs.py --check  # exit 1 naming the stale files, write nothing

Sources: :func:`ledger.catalogue.render` (event classes and the sources' ``PRODUCES``)
and :func:`api.cli_reference.render` (``hookledger --help`` of every command). Run it
with the project's virtualenv (``.venv/bin/python scripts/gen_docs.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def targets(root: Path = ROOT) -> dict[Path, Callable[[], str]]:
    from api.cli_reference import render as cli_render
    from ledger.catalogue import render as events_render

    return {root / "docs" / "events.md": events_render, root / "docs" / "cli.md": cli_render}


def main(argv: list[str], root: Path = ROOT) -> int:
    check = "--check" in argv
    stale = []
    for path, render in targets(root).items():
        text = render()
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not check:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(root)}", file=sys.stderr)
    if check and stale:
        names = ", ".join(str(p.relative_to(root)) for p in stale)
        print(f"stale: {names}; run: python scripts/gen_docs.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
