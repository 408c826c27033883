"""The package rules of the design, checked on the source with ``ast``.

* Imports point one way: ``api`` -> ``projections`` -> ``ledger``; ``ledger`` never
  imports the web stack or DuckDB, ``projections`` never the web stack.
* Importing a module only defines things: no engines, applications or I/O at import.
* ``ruff check`` (the rules in pyproject.toml) passes on the whole repository.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WEB = {"api", "starlette", "sse_starlette", "uvicorn"}
FORBIDDEN = {"ledger": WEB | {"projections", "duckdb"}, "projections": WEB}
ALLOWED_AT_IMPORT = {
    "PrivateAttr",  # pydantic field declaration
    "TypeVar",
    "ClassVar",
    "re.compile",
    "functools.lru_cache",  # a decorator factory
    "threading.Lock",  # a module-level lock guarding process state (ledger.gcpause)
    "frozenset",
    "logging.getLogger",
    "uuid.UUID",
    "dataclass",
    "field",
    "ConfigDict",
    # ledger/session.py registers its event classes by name
    "Session.EVENT_CLASSES.update",
    "vars",
    "vars(Session).items",
    "isinstance",
    "issubclass",
}


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def imported_packages(tree: ast.Module, package: str) -> Iterator[tuple[int, str]]:
    """(line, top-level package) of every import anywhere in the module, relative ones resolved."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            yield node.lineno, name.split(".")[0]


def import_time_calls(body: list[ast.stmt]) -> Iterator[tuple[int, str]]:
    """(line, callee) of every call executed when the statements run at import time."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            evaluated: list[ast.AST] = [
                *node.decorator_list,
                *node.args.defaults,
                *filter(None, node.args.kw_defaults),
            ]
        elif isinstance(node, ast.ClassDef):
            evaluated = [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]
            yield from import_time_calls(node.body)
        else:
            evaluated = [node]
        for part in evaluated:
            for call in (n for n in ast.walk(part) if isinstance(n, ast.Call)):
                yield call.lineno, ast.unparse(call.func)


def package_of(path: Path) -> str:
    return ".".join(path.parent.relative_to(ROOT).parts)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_one_way(package: str) -> None:
    violations = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in modules(package)
        for line, name in imported_packages(ast.parse(path.read_text()), package_of(path))
        if name in FORBIDDEN[package]
    ]
    assert modules(package) and not violations


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_importing_a_module_only_defines_things(package: str) -> None:
    violations = [
        f"{path.relative_to(ROOT)}:{line} calls {callee}() at import time"
        for path in modules(package)
        for line, callee in import_time_calls(ast.parse(path.read_text()).body)
        if callee not in ALLOWED_AT_IMPORT
    ]
    assert not violations


def test_the_checks_catch_what_they_look_for() -> None:
    tree = ast.parse(
        "import starlette.routing\n"
        "from ..projections import runner\n"
        "def f():\n    import duckdb\n"
        "engine = create_engine('sqlite://')\n"
        "class C:\n    ledger = Ledger({})\n"
        "def g(x=open('f')):\n    return create_engine('sqlite://')\n"
    )
    assert [n for _, n in imported_packages(tree, "ledger.sources")] == [
        "starlette",
        "ledger",
        "duckdb",
    ]
    assert [n for _, n in imported_packages(tree, "ledger")] == [
        "starlette",
        "projections",
        "duckdb",
    ]
    assert [c for _, c in import_time_calls(tree.body)] == ["create_engine", "Ledger", "open"]


def test_hook_command_path_does_not_load_the_database_stack() -> None:
    # `hookledger hook` runs on every agent event: it loads the CLI, the settings and
    # the hook client, and must not pay for SQLAlchemy, eventsourcing or pydantic.
    import subprocess
    import sys

    code = (
        "import sys, api.cli, api.hook_client, ledger.config; "
        "print(sorted(m for m in ('sqlalchemy', 'eventsourcing', 'pydantic', 'duckdb') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_ruff_finds_nothing() -> None:
    """Lint runs with the tests, so CI fails on an undefined name or an unused import."""
    ruff = Path(sys.executable).with_name("ruff")
    done = subprocess.run(
        [str(ruff), "check", "--no-cache", "--output-format", "concise", "."],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_merge_conflict_markers() -> None:
    """A conflict left in a docstring or a document still imports and lints: look for
    the markers themselves (api/app.py's endpoint list held both sides of one)."""
    markers = ("<<<<<<< ", ">>>>>>> ")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for top in ("api", "ledger", "projections", "docs", "scripts", "notebooks", "tests")
        for path in sorted((ROOT / top).rglob("*"))
        if path.suffix in (".py", ".md", ".js", ".css", ".html", ".toml")
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if line.startswith(markers)
    ] + [
        f"{name}:{n}"
        for name in ("README.md", "pyproject.toml")
        for n, line in enumerate((ROOT / name).read_text().splitlines(), 1)
        if line.startswith(markers)
    ]
    assert found == []
