"""Export anchors: the chain heads of every export, kept in the data directory.

Each export also writes ``<data_dir>/anchors/export-<time>-<link>.json`` with the head
(position, version, digest) of every stream it holds. Store ``verify`` reads them as
extra :class:`ledger.verify.Anchor`\\ s, so a tail cut after an export is detected even
when the ``event_index`` read model (the other anchors) has been rebuilt from the cut log.

Each file names the store it came from (``store``: :meth:`ledger.config.Settings.store_identity`),
and only the current store's are read: one data directory may serve a SQLite store and
PostgreSQL schemas in turn, whose logs have nothing in common. A file without ``store``
(written before it was recorded) is read for every store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ledger.verify import Anchor

FOLDER = "anchors"


def save_anchors(data_dir: Path, manifest: dict[str, Any], output: Path, store: str) -> Path:
    """Write the export's heads of the store named ``store``; returns the file's path."""
    folder = data_dir / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    stamp = manifest["created_at"].replace(":", "").replace("-", "").replace(".", "")
    path = folder / f"export-{stamp}-{manifest['link_head'][:8] or 'empty'}.json"
    data = {
        "store": store,
        "export": str(output),
        "created_at": manifest["created_at"],
        "store_head_position": manifest["store_head_position"],
        "heads": {
            s: {k: h[k] for k in ("head_position", "head_version", "head_digest")}
            for s, h in manifest["streams"].items()
        },
    }
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def load_anchors(data_dir: Path, store: str) -> list[Anchor]:
    """Every export anchor of ``data_dir`` for the store named ``store``, sorted by
    position, duplicates removed.

    Raises ValueError naming the file when an anchor file is unreadable or malformed
    (an altered anchor file is itself a finding, never skipped)."""
    found: set[Anchor] = set()
    for path in sorted((data_dir / FOLDER).glob("export-*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("store", store) != store:
                continue  # another store's export
            for stream, h in data["heads"].items():
                found.add(
                    Anchor(int(h["head_position"]), stream, int(h["head_version"]),
                           str(h["head_digest"]))
                )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"export anchor file {path} is unreadable: {e!r}") from e
    return sorted(found, key=lambda a: (a.position, a.stream_id))
