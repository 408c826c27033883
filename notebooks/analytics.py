# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # hookledger analytics: sessions, tools, tokens and cost
#
# This notebook asks the DuckDB analytics model the questions of
# `projections/analytics/queries.py` and plots the answers. Its data directory is
# `DATA_DIR` (the parameters cell below): `HOOKLEDGER_DATA_DIR`, as for the CLI (with
# `HOOKLEDGER_DATABASE_URL` when the ledger is on PostgreSQL), so
# `HOOKLEDGER_DATA_DIR=~/ledger .venv/bin/python notebooks/analytics.py` reads your own
# ledger and leaves it as it is. Without it, the bundled real Claude Code transcripts
# (`tests/fixtures`, see each folder's PROVENANCE.md) are imported through the real
# importer into a fresh temporary data directory, deleted at the end. Plots are saved
# under `test-artifacts/notebooks/`.
#
# Run it as a script (`.venv/bin/python notebooks/analytics.py`), or open it in Jupyter
# (`pip install -e '.[notebooks]'`, then `jupyter lab notebooks/` and open this file with
# *Open With → Notebook*), where the plots also show below their cells (there, set
# `DATA_DIR` in the parameters cell, or start Jupyter with `HOOKLEDGER_DATA_DIR` set).
# `HOOKLEDGER_NOTEBOOK_OUT` overrides the plot directory.

# %% tags=["parameters"]
import os

DATA_DIR = os.environ.get("HOOKLEDGER_DATA_DIR") or None
"""The ledger to read; None: a temporary one with the bundled sample data."""

# %%
# ruff: noqa: E402  (the parameters cell comes first, as papermill and Jupyter expect)
import shutil
import sys
import tempfile
from pathlib import Path

import matplotlib

if "ipykernel" not in sys.modules:  # a script: plots go to files; in Jupyter they also show
    matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parent.parent if "__file__" in globals() else Path.cwd().parent
sys.path.insert(0, str(ROOT))

from ledger.app import Ledger
from ledger.config import Settings
from ledger.importer import discover, import_paths
from projections.analytics import (
    busiest_projects,
    connect,
    cost_per_day,
    error_rate,
    session_durations,
    tool_usage,
)

OUT = Path(os.environ.get("HOOKLEDGER_NOTEBOOK_OUT", ROOT / "test-artifacts" / "notebooks"))
OUT.mkdir(parents=True, exist_ok=True)
FIXTURES = ROOT / "tests" / "fixtures"
SOURCES = [
    FIXTURES / "spotter-claude-transcripts",
    FIXTURES / "agentcmd-claude-transcripts",
    FIXTURES / "claude-code-log-fixtures",
]


def show(rows, columns=None, n=15):
    """Print rows (list of dicts) as a small text table."""
    if not rows:
        print("(no rows)")
        return
    columns = columns or list(rows[0])
    cells = [[("" if r[c] is None else str(r[c]))[:48] for c in columns] for r in rows[:n]]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


# %% [markdown]
# ## The data directory: `DATA_DIR`, or the sample data imported into a fresh one

# %%
if DATA_DIR:
    settings = Settings.from_env(DATA_DIR)  # the CLI's settings (PostgreSQL too)
    sample_dir = None
    print("reading the ledger in", settings.data_dir)
else:
    sample_dir = Path(tempfile.mkdtemp(prefix="hookledger-notebook-"))
    settings = Settings(sample_dir)
    ledger = Ledger(settings.event_store_env())
    summary = import_paths(ledger, discover(SOURCES))
    ledger.close()
    print(summary.as_dict()["events_appended"], "events appended from", len(discover(SOURCES)), "files")

# %% [markdown]
# ## Connect: the DuckDB model catches up with the ledger first

# %%
con = connect(settings)
for table in ("events", "sessions", "prompt_batches", "tool_calls", "usage"):
    print(f"{table:<15}", con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

# %% [markdown]
# ## Cost per day and model (USD, bundled price table)

# %%
costs = cost_per_day(con)
show(costs, ["day", "model", "responses", "output_tokens", "cache_read_input_tokens", "cost_usd"])

days = sorted({r["day"] for r in costs})
models = sorted({r["model"] for r in costs})
fig, ax = plt.subplots(figsize=(9, 4))
bottom = [0.0] * len(days)
for m in models:
    values = [sum(r["cost_usd"] for r in costs if r["day"] == d and r["model"] == m) for d in days]
    ax.bar(days, values, bottom=bottom, label=m)
    bottom = [b + v for b, v in zip(bottom, values, strict=True)]
ax.set_ylabel("USD")
ax.set_title("Cost per day and model")
ax.legend(fontsize=7)
fig.autofmt_xdate()
fig.tight_layout()
fig.savefig(OUT / "cost_per_day.png", dpi=100)

# %% [markdown]
# ## Tool frequency and duration (p50 / p95, ms)

# %%
tools = tool_usage(con, limit=15)
show(tools)
fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
names = [r["tool_name"] for r in tools]
a1.barh(names, [r["calls"] for r in tools])
a1.invert_yaxis()
a1.set_title("Tool calls")
timed = [r for r in tools if r["p50_ms"] is not None]
a2.barh([r["tool_name"] for r in timed], [r["p95_ms"] for r in timed], label="p95", alpha=0.5)
a2.barh([r["tool_name"] for r in timed], [r["p50_ms"] for r in timed], label="p50")
a2.set_xscale("log")
a2.invert_yaxis()
a2.set_xlabel("ms")
a2.set_title("Duration")
a2.legend()
fig.tight_layout()
fig.savefig(OUT / "tool_usage.png", dpi=100)

# %% [markdown]
# ## Session duration distribution

# %%
durations = session_durations(con)
show(durations)
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.bar([r["bucket"] for r in durations], [r["sessions"] for r in durations])
ax.set_ylabel("sessions")
ax.set_title("Session duration")
fig.tight_layout()
fig.savefig(OUT / "session_durations.png", dpi=100)

# %% [markdown]
# ## Error rate by tool

# %%
errors = [r for r in error_rate(con) if r["finished"] > 0]
show(errors)
fig, ax = plt.subplots(figsize=(7, 4))
ax.barh([r["tool_name"] for r in errors], [100 * r["error_rate"] for r in errors])
ax.invert_yaxis()
ax.set_xlabel("% of finished calls that failed")
ax.set_title("Error rate by tool")
fig.tight_layout()
fig.savefig(OUT / "error_rate.png", dpi=100)

# %% [markdown]
# ## Busiest projects

# %%
projects = busiest_projects(con, limit=10)
show(projects, ["project", "sessions", "subagent_runs", "prompts", "tool_calls", "cost_usd"])
fig, ax = plt.subplots(figsize=(9, 4))
labels = [Path(r["project"]).name or r["project"] for r in projects]
ax.barh(labels, [r["tool_calls"] for r in projects], label="tool calls")
ax.barh(labels, [r["prompts"] for r in projects], label="prompts")
ax.invert_yaxis()
ax.legend()
ax.set_title("Busiest projects")
fig.tight_layout()
fig.savefig(OUT / "busiest_projects.png", dpi=100)

# %% [markdown]
# ## Any SQL: the model is plain DuckDB

# %%
print(con.sql(
    "SELECT kind, count(*) AS events FROM events GROUP BY kind ORDER BY events DESC LIMIT 8"
))
con.close()
if sample_dir is not None:
    shutil.rmtree(sample_dir)  # the imported sample store was only for this notebook
print("plots in", OUT)
