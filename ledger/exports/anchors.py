"""Export anchors: the chain heads of every export, kept in the data directory.

Each export also writes ``<data_dir>/anchors/export-<time>-<link>.json`` with the head
(position, version, digest) of every stream it holds, and the export's link chain head
(``link``: the last row's ``link`` and its position; with ``filters``, the rows it
covers). Store ``verify`` reads the heads as extra :class:`ledger.verify.Anchor`\\ s, so
a tail cut after an export is detected even when the ``event_index`` read model (the
other anchors) has been rebuilt from the cut log, and the link as a
:class:`ledger.verify.LinkAnchor`, so is a change of the log's order that keeps every
stream's versions in order (two streams' events swapped). Files written before ``link``
existed give heads only.

Each file names the store it came from by the store's own id (``store_id``:
:func:`ledger.store_id.store_id`, kept inside the store), and only the current store's
are read: one data directory may serve a SQLite store and PostgreSQL schemas in turn,
whose logs have nothing in common. The id does not depend on how the store is reached
(``localhost`` or ``127.0.0.1``, a trailing slash, another port through a proxy), so an
export taken through one URL anchors a ``verify`` run through another. ``store`` (the
URL form, :meth:`ledger.config.Settings.store_identity`) is kept too.

A file is read when its ``store_id`` is the store's id, or its ``store`` the store's URL
form (host names of the loopback interface taken as one): the URL still ties the anchors
to the place they were recorded for when the id was removed from the store or the store
replaced there, and files written before ``store_id`` existed name only ``store``. A
file naming no store at all is read for every store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger.exports.check import MANIFEST, Problem
from ledger.exports.records import Filters
from ledger.verify import Anchor, LinkAnchor

FOLDER = "anchors"


def save_anchors(
    data_dir: Path, manifest: dict[str, Any], output: Path, store_id: str, store: str
) -> Path:
    """Write the export's heads of the store ``store_id`` (described as ``store``);
    returns the file's path."""
    folder = data_dir / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    stamp = manifest["created_at"].replace(":", "").replace("-", "").replace(".", "")
    path = folder / f"export-{stamp}-{manifest['link_head'][:8] or 'empty'}.json"
    data = {
        "store_id": store_id,
        "store": store,
        "export": str(output),
        "created_at": manifest["created_at"],
        "store_head_position": manifest["store_head_position"],
        "filters": manifest["filters"],
        "link": {"position": manifest["last_position"], "head": manifest["link_head"]},
        "heads": {
            s: {k: h[k] for k in ("head_position", "head_version", "head_digest")}
            for s, h in manifest["streams"].items()
        },
    }
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


@dataclass
class LoadedAnchors:
    anchors: list[Anchor] = field(default_factory=list)
    """Sorted by position, duplicates removed."""
    links: list[LinkAnchor] = field(default_factory=list)
    """The link chain heads of the files that keep one (not of an empty export)."""
    other_stores: dict[str, int] = field(default_factory=dict)
    """Anchor files left out as another store's: count per store (its id, or its
    ``store`` text for an old file)."""


def load_anchors(data_dir: Path, store_id: str | None, store: str) -> LoadedAnchors:
    """Every export anchor of ``data_dir`` for the store whose id is ``store_id`` (None:
    it has none yet, so no file with an id is its) and whose URL form is ``store``.

    Raises ValueError naming the file when an anchor file is unreadable or malformed
    (an altered anchor file is itself a finding, never skipped)."""
    found: set[Anchor] = set()
    loaded = LoadedAnchors()
    for path in sorted((data_dir / FOLDER).glob("export-*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            owner = _owner(data, store_id, store)
            if owner is not None:
                loaded.other_stores[owner] = loaded.other_stores.get(owner, 0) + 1
                continue
            for stream, h in data["heads"].items():
                found.add(
                    Anchor(int(h["head_position"]), stream, int(h["head_version"]),
                           str(h["head_digest"]))
                )
            if data.get("link") is not None and data["link"]["position"] is not None:
                loaded.links.append(LinkAnchor(
                    _int(data["link"]["position"]), _str(data["link"]["head"]), path.name,
                    Filters.from_dict(data.get("filters") or {}),
                    data["export"] if isinstance(data.get("export"), str) else None,
                ))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"export anchor file {path} is unreadable: {e!r}") from e
    loaded.anchors = sorted(found, key=lambda a: (a.position, a.stream_id))
    return loaded


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{value!r} is not an integer")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _owner(data: dict[str, Any], store_id: str | None, store: str) -> str | None:
    """None when the anchor file ``data`` is the current store's, else the store it names.

    A file is the store's when it names the store's id, or the store's URL form: the id
    adds the URLs the store is reached by under other names, and the URL keeps a store
    whose id was removed or replaced (a new ``events.db`` in the same place) answerable
    for the anchors recorded there. Raises TypeError for a malformed ``store_id``/``store``."""
    named = data.get("store_id"), data.get("store")
    if not all(v is None or isinstance(v, str) for v in named):
        raise TypeError("'store_id' or 'store' is not a string")
    if named == (None, None):
        return None  # written before the store was recorded: every store's
    if named[0] is not None and named[0] == store_id:
        return None
    if named[1] is not None and _loopback(named[1]) == _loopback(store):
        return None
    return named[0] or named[1]


def _loopback(store: str) -> str:
    """``store`` (URL form) with a loopback host name spelt one way."""
    for name in ("//localhost:", "//[::1]:", "//::1:"):
        store = store.replace(name, "//127.0.0.1:")
    return store


def check_export(path: Path, manifest: dict[str, Any], data_dir: Path) -> tuple[str | None, list[Problem]]:
    """Check the export at ``path`` (its ``manifest``, already verified against its rows)
    against the anchor file that ``data_dir``'s store wrote when the export was taken:
    the file with the manifest's ``created_at`` (else, the newest one written for the
    directory ``path``). Its store head, stream heads and, when it keeps them, filters
    and link head must be the manifest's: a forger who redoes an export consistently
    (chains, links, counts, sha256s) cannot redo the anchor file kept elsewhere.

    Returns (the anchor file's name or None, problems); a missing or unreadable
    anchor file is a problem."""
    created_at, where = manifest.get("created_at"), path.resolve()
    by_time, by_path = [], []
    for file in sorted((data_dir / FOLDER).glob("export-*.json")):
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise TypeError("not a JSON object")
        except (OSError, ValueError, TypeError) as e:
            return file.name, [Problem(file.name, None, f"export anchor file is unreadable: {e!r}")]
        if data.get("created_at") == created_at:
            by_time.append((file, data))
        elif isinstance(data.get("export"), str) and Path(data["export"]).resolve() == where:
            by_path.append((file, data))
    if not by_time and not by_path:
        return None, [Problem(
            MANIFEST, None,
            f"no export anchor file in {data_dir / FOLDER} records this export (created_at "
            f"{created_at!r}, directory {where}): it was not taken from this data "
            "directory's store, or its created_at was changed",
        )]
    found: list[Problem] = []
    for file, data in by_time or by_path[-1:]:
        found = _differences(file.name, data, manifest)
        if not found:
            return file.name, []
    return file.name, found


def _differences(name: str, data: dict[str, Any], manifest: dict[str, Any]) -> list[Problem]:
    """How the manifest differs from the anchor file ``name`` (``data``)."""
    def fail(message: str, stream: str | None = None) -> None:
        found.append(Problem(MANIFEST, None, f"{message} (export anchor file {name})",
                             stream_id=stream))

    found: list[Problem] = []
    if data.get("created_at") != manifest.get("created_at"):
        fail(f"created_at {manifest.get('created_at')!r} differs from the anchor's "
             f"{data.get('created_at')!r}")
    if data.get("store_head_position") != manifest.get("store_head_position"):
        fail(f"store_head_position {manifest.get('store_head_position')} differs from the "
             f"anchor's {data.get('store_head_position')}")
    if "filters" in data and data["filters"] != manifest.get("filters"):
        fail(f"filters {manifest.get('filters')} differ from the anchor's {data['filters']}")
    link = data.get("link")
    if isinstance(link, dict) and (link.get("position"), link.get("head")) != (
        manifest.get("last_position"), manifest.get("link_head")
    ):
        fail(f"link_head {str(manifest.get('link_head'))[:12]}… at position "
             f"{manifest.get('last_position')} differs from the anchor's "
             f"{str(link.get('head'))[:12]}… at position {link.get('position')}: rows "
             "altered, added, dropped or reordered, and the export redone to match")
    heads = data.get("heads") if isinstance(data.get("heads"), dict) else {}
    streams = manifest.get("streams") or {}
    keys = ("head_position", "head_version", "head_digest")
    for stream in sorted(set(heads) | set(streams)):
        want, got = heads.get(stream), streams.get(stream)
        if want is None or got is None:
            fail("stream is " + ("not in the anchor's heads" if want is None
                                 else "in the anchor's heads but not in the manifest"), stream)
        elif not isinstance(want, dict) or [want.get(k) for k in keys] != [got.get(k) for k in keys]:
            fail(f"head v{got.get('head_version')} digest {str(got.get('head_digest'))[:12]}… "
                 f"at position {got.get('head_position')} differs from the anchor's "
                 f"{want!r:.120}", stream)
    return found
