"""The notebooks run end to end as scripts on the bundled real data and save their plots;
run as Jupyter runs them (code cells in order, one namespace, no ``__file__``), they read
the data directory ``HOOKLEDGER_DATA_DIR`` names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.app import Ledger
from ledger.config import Settings

from conftest import FIXTURES, cli

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))
ARTIFACTS = ROOT / "test-artifacts" / "notebooks"
PLOTS = {
    "analytics.py": [
        "cost_per_day.png", "tool_usage.png", "session_durations.png", "error_rate.png",
        "busiest_projects.png",
    ],
}


def test_every_notebook_is_listed() -> None:
    assert NOTEBOOKS and {p.name for p in NOTEBOOKS} == set(PLOTS)


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_and_saves_its_plots(notebook: Path) -> None:
    for name in PLOTS[notebook.name]:
        (ARTIFACTS / name).unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")}
    env["MPLBACKEND"] = "Agg"
    run = subprocess.run(
        [sys.executable, str(notebook)], cwd=ROOT / "notebooks", env=env,
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    for name in PLOTS[notebook.name]:
        png = ARTIFACTS / name
        assert png.exists() and png.stat().st_size > 1000, name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert "Bash" in run.stdout  # the tool table printed real data


CELLS_IN_ORDER = """
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
namespace = {"__name__": "__main__"}  # as a kernel: no __file__
parts = re.split(r"^(# %%.*)$", text, flags=re.M)[1:]
for n, (header, cell) in enumerate(zip(parts[::2], parts[1::2])):
    if "[markdown]" not in header:
        exec(compile(cell, f"<cell {n}>", "exec"), namespace)
"""
"""Executes a jupytext percent file's cells in order (nbclient is not a dependency)."""


@pytest.mark.slow
def test_the_analytics_notebook_reads_the_data_dir_hookledger_data_dir_names(
    tmp_path: Path,
) -> None:
    # Before, the notebook always imported the bundled Claude transcripts into a temporary
    # store: it could not be pointed at a ledger. Here: a store of Gemini chats and a Codex
    # rollout (no Claude session), imported with the CLI.
    settings = Settings(tmp_path / "ledger")
    cli(settings, "import", str(FIXTURES / "agentcmd-gemini-sessions"),
        str(FIXTURES / "agentcmd-codex-rollouts"))
    ledger = Ledger(settings.event_store_env())
    events = ledger.max_position()
    ledger.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")}
    env |= {"MPLBACKEND": "Agg", "HOOKLEDGER_DATA_DIR": str(settings.data_dir),
            "HOOKLEDGER_NOTEBOOK_OUT": str(tmp_path / "plots")}
    run = subprocess.run(
        [sys.executable, "-c", CELLS_IN_ORDER, str(ROOT / "notebooks" / "analytics.py")],
        cwd=ROOT / "notebooks", env=env, capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert f"reading the ledger in {settings.data_dir}" in run.stdout
    assert re.search(rf"^events\s+{events}$", run.stdout, re.M), run.stdout[:2000]
    assert "shell" in run.stdout and "Bash" not in run.stdout  # Codex's tool, no Claude's
    assert sorted(p.name for p in (tmp_path / "plots").glob("*.png")) == sorted(PLOTS["analytics.py"])
    assert (settings.data_dir / "events.db").exists()  # the ledger is left where it was
