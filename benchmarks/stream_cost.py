"""What one SSE client costs the server: open ``URL``, read it, and stop once the
server process ``PID`` has gone idle (its CPU time, from ``/proc/PID/stat``, grew by
less than 0.1 s in 2 s). Prints the time to the first ``id:``, the ids received, how
long the server was busy and its CPU seconds. Linux only. See docs/benchmarks.md
("A heavy user's store")."""

from __future__ import annotations

import argparse
import os
import threading
import time

import httpx


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("url")
    ap.add_argument("pid", type=int)
    args = ap.parse_args()
    c0, t0 = cpu_seconds(args.pid), time.perf_counter()
    seen: dict[str, float] = {"ids": 0}

    def read() -> None:
        with httpx.stream("GET", args.url, timeout=None) as r:
            for line in r.iter_lines():
                if line.startswith("id:"):
                    seen["ids"] += 1
                    seen.setdefault("first", time.perf_counter() - t0)

    threading.Thread(target=read, daemon=True).start()
    last = cpu_seconds(args.pid)
    time.sleep(2)
    while cpu_seconds(args.pid) - last >= 0.1 and time.perf_counter() - t0 < 600:
        last = cpu_seconds(args.pid)
        time.sleep(2)
    print(f"first id after {seen.get('first', float('nan')):.2f} s, {seen['ids']:.0f} ids; "
          f"server busy {time.perf_counter() - t0 - 2:.0f} s, CPU {cpu_seconds(args.pid) - c0:.1f} s")


if __name__ == "__main__":
    main()
