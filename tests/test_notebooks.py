"""The notebooks run end to end as scripts on the bundled real data and save their plots."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
