"""Generated references checked in: docs/events.md and docs/cli.md must be current, and
the sources' ``PRODUCES`` declarations (which the catalogue prints) must cover what
the sources really produce from the fixtures."""

from __future__ import annotations

import importlib.util
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from api import cli_reference
from ledger import catalogue
from ledger.observation import Observation
from ledger.parsing import discover, parse_file
from ledger.session import Session
from ledger.sources import claude_hooks

from conftest import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
FIX = f"regenerate with: .venv/bin/{catalogue.REGENERATE}"


def _gen_docs():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("name", "render"), [("events.md", catalogue.render), ("cli.md", cli_reference.render)]
)
def test_checked_in_reference_is_current(name: str, render) -> None:  # type: ignore[no-untyped-def]
    current = (ROOT / "docs" / name).read_text(encoding="utf-8")
    assert current == render(), f"docs/{name} is stale; {FIX}"


def test_catalogue_names_every_event_class_with_version_and_fields() -> None:
    text = catalogue.render()
    for qualname, cls in catalogue.event_classes():
        assert f"### {qualname}\n" in text
        assert f"class_version {cls.class_version}." in text
        own = set(cls.model_fields) - set(Session.Event.model_fields)
        for field in own:
            assert f"| `{field}` |" in text
    assert "| `cost_usd` | `float` | required | USD |" in text
    assert "| `duration_ms` | `int \\| None` | `None` | ms |" in text


def test_a_new_event_class_makes_the_checked_in_catalogue_stale(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    class ProbeHappened(Session.Event):
        """A probe (exists only in this test)."""

        probe_ms: int

    monkeypatch.setattr(Session, "ProbeHappened", ProbeHappened, raising=False)
    assert "### Session.ProbeHappened" in catalogue.render()
    assert "| `probe_ms` | `int` | required | ms |" in catalogue.render()
    # The check the lead runs at merge time: stale -> exit 1 and the fix named.
    (tmp_path / "docs").mkdir()
    for name in ("events.md", "cli.md"):
        shutil.copy(ROOT / "docs" / name, tmp_path / "docs" / name)
    gen = _gen_docs()
    assert gen.main(["--check"], root=tmp_path) == 1
    assert gen.main([], root=tmp_path) == 0  # regenerates
    assert gen.main(["--check"], root=tmp_path) == 0
    assert "ProbeHappened" in (tmp_path / "docs" / "events.md").read_text()


def test_declarations_name_real_event_classes() -> None:
    decls = catalogue.source_declarations()
    assert decls
    for module, fmt, kinds in decls:
        unknown = kinds - set(Session.EVENT_CLASSES)
        assert not unknown, f"{module} PRODUCES[{fmt!r}] names no Session event: {unknown}"
    declared_formats = {fmt for _, fmt, _ in decls}
    for module_name in {m for m, _, _ in decls} | {"ledger.sources.claude_hooks"}:
        module = importlib.import_module(module_name)
        if hasattr(module, "SOURCE_FORMAT"):
            assert module.SOURCE_FORMAT in declared_formats, f"{module_name}: declare PRODUCES"


def _declared() -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for _, fmt, kinds in catalogue.source_declarations():
        out[fmt] = out.get(fmt, frozenset()) | kinds
    return out


def test_fixture_imports_produce_only_declared_events() -> None:
    """Every fixture file the importer accepts, and every Claude Code hook payload in
    the hook logs: the (source_format, event) pairs seen are all declared."""
    seen: dict[str, set[str]] = {}
    for path in discover([FIXTURES]):
        try:
            items = list(parse_file(path))
        except Exception:  # not an importable transcript (hook logs, other agents' files)
            continue
        for o in items:
            if isinstance(o, Observation):
                seen.setdefault(o.source_format, set()).add(o.kind)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    for path in FIXTURES.rglob("*.json"):
        data = json.loads(path.read_bytes())
        hooks = isinstance(data, list) and data and isinstance(data[0], dict)
        if hooks and "hook_event_name" in data[0]:
            for i, payload in enumerate(data):
                for o in claude_hooks.parse_hook(payload, f"{path.name}:{i}", at):
                    seen.setdefault(o.source_format, set()).add(o.kind)
    assert {"claude-code.transcript", "claude-code.hook"} <= seen.keys()
    declared = _declared()
    for fmt, kinds in seen.items():
        assert fmt in declared, f"no source module declares PRODUCES[{fmt!r}]"
        assert kinds <= declared[fmt], f"{fmt}: undeclared {kinds - declared[fmt]}"
