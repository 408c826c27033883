"""Developer entry point (standard library only): ``python3 scripts/dev.py demo|test``.

* ``demo``: a virtualenv in ``.venv`` with hookledger installed, the bundled real
  sessions of every agent (``tests/fixtures``) imported into a fresh ``.demo-data``
  directory (an earlier one is deleted), then ``hookledger serve`` on
  http://127.0.0.1:8765.
* ``test``: the same virtualenv with the dev extras (and ccusage from npm when npm is
  available, for the live cross-check), then the whole test suite, in one pytest-xdist
  worker per CPU, at most 4 (the tests of a module stay on one worker); further
  arguments go to pytest (``-n 0``: one process).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")


def sh(*cmd: str | Path, **kw: object) -> None:
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kw)  # type: ignore[arg-type]


def ensure_env(extras: str = "") -> None:
    if not (BIN / "python").exists():
        venv.EnvBuilder(with_pip=True).create(VENV)
    sh(BIN / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", "-e", f".{extras}")


def demo() -> None:
    ensure_env()
    data = ROOT / ".demo-data"
    shutil.rmtree(data, ignore_errors=True)
    sh(BIN / "hookledger", "--data-dir", data, "import", ROOT / "tests" / "fixtures")
    sh(BIN / "hookledger", "--data-dir", data, "sessions", "--limit", "10")
    sh(BIN / "hookledger", "--data-dir", data, "serve")


def ensure_chromium() -> None:
    """The browser test drives Debian's Chromium (never a Playwright browser download)."""
    if Path("/usr/bin/chromium").exists() or not shutil.which("apt-get"):
        return
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        try:
            sh("apt-get", "update", "-qq")
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            sh("apt-get", "install", "-y", "-qq", "chromium", env=env)
        except subprocess.CalledProcessError:
            print("chromium could not be installed: the browser test will be skipped")
    else:
        print("/usr/bin/chromium is missing (apt-get install chromium): the browser test will be skipped")


def test(args: list[str]) -> None:
    ensure_env("[dev]")
    ensure_chromium()
    if shutil.which("npm"):
        try:  # optional: without it the test uses the recorded ccusage numbers
            sh("bash", ROOT / "tests" / "tools" / "install_ccusage.sh")
        except subprocess.CalledProcessError:
            print("ccusage could not be installed; the live cross-check will be skipped")
    if not any(a.startswith(("-n", "--numprocesses")) for a in args):
        # one worker per CPU, at most 4 (each runs servers, projection children and
        # PostgreSQL connections of its own; PostgreSQL allows 100 by default); a
        # module's tests stay on one worker (module fixtures: one Chromium, one hook
        # journal written once)
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        args = [f"--numprocesses={min(cpus or 1, 4)}", "--dist=loadfile", *args]
    sh(BIN / "python", "-m", "pytest", *args)


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "demo":
        demo()
    elif command == "test":
        test(sys.argv[2:])
    else:
        sys.exit("usage: python3 scripts/dev.py demo|test [pytest args]")
