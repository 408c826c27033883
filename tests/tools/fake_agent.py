"""A fake agent for runner tests: replays a recorded stream to stdout, line by line.

Usage: ``python fake_agent.py RECORDING [--cut] [--exit N] [--signal NAME] [--array]``

* ``--cut``: the last line is written only half, without its newline (a stream cut).
* ``--exit N``: exit with status N after the stream.
* ``--signal NAME``: kill itself with signal NAME (e.g. ``SIGKILL``) after the stream.
* ``--array``: the recording is a JSON array of events (written one per line).
* ``--hold``: after the stream, wait (at most 60 s) for SIGTERM, SIGHUP or SIGQUIT, then
  exit with ``--exit`` (an agent that handles the signal and exits cleanly).
* ``--hold-log PATH``: with ``--hold``, create PATH once holding and append the name of
  each signal received; the agent waits 0.5 s after the first, so a second one sent
  with it is counted too.
* ``--senders``: the ``--interrupt`` and ``--hold-log`` waits block their signals and
  take them with ``sigtimedwait``, logging ``NAME from PID``: who sent each (0: the
  kernel, i.e. a terminal). Two sent before the first is taken are one (the kernel
  keeps one pending), but the sender of the one taken is known.
* ``--interrupt PATH``: after the first line, create PATH and wait (at most 20 s, then
  exit 99) for SIGINT, which ``--on-interrupt`` handles: ``die`` (Python's default: it
  dies of SIGINT), ``exit`` (exit with ``--exit`` at once: codex exec exits 0, others
  130) or ``go-on`` (cancel nothing, write the rest of the stream: an agent that keeps
  running). Each SIGINT received appends a line to PATH, so a test can count them; the
  agent waits 0.5 s after the first, so a second one sent with it is counted too.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("recording")
parser.add_argument("--cut", action="store_true")
parser.add_argument("--exit", type=int, default=0)
parser.add_argument("--signal", default=None)
parser.add_argument("--array", action="store_true")
parser.add_argument("--hold", action="store_true")
parser.add_argument("--hold-log", default=None)
parser.add_argument("--interrupt", default=None)
parser.add_argument("--on-interrupt", choices=("die", "exit", "go-on"), default="die")
parser.add_argument("--senders", action="store_true")
args = parser.parse_args()
held: list[str] = []


def hold(signum: int, frame: object) -> None:
    held.append(signal.Signals(signum).name)
    if args.hold_log:
        with open(args.hold_log, "a") as log:
            log.write(f"{held[-1]}\n")
    else:
        sys.exit(args.exit)


if args.hold:
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, hold)

with open(args.recording, "rb") as f:
    data = f.read()
if args.array:
    lines = [json.dumps(r).encode() + b"\n" for r in json.loads(data)]
else:
    lines = [line + b"\n" for line in data.split(b"\n") if line.strip()]
if args.cut and lines:
    last = lines[-1].rstrip(b"\n")
    lines[-1] = last[: len(last) // 2]
out = sys.stdout.buffer


def await_senders(sigs: tuple[signal.Signals, ...], path: str, limit_s: float) -> None:
    """``--senders``: create ``path``, wait (at most ``limit_s``, then exit 99) for one of
    ``sigs``, log it and those arriving in the next 0.5 s with their senders."""
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    open(path, "w").close()
    first = signal.sigtimedwait(sigs, limit_s)
    if first is None:
        sys.exit(99)  # never signalled
    got = [first]
    deadline = time.monotonic() + 0.5
    while (left := deadline - time.monotonic()) > 0:
        if (info := signal.sigtimedwait(sigs, left)) is not None:
            got.append(info)
    with open(path, "a") as log:
        log.writelines(f"{signal.Signals(i.si_signo).name} from {i.si_pid}\n" for i in got)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)


def interrupted(signum: int, frame: object) -> None:
    with open(args.interrupt, "a") as log:
        log.write("SIGINT\n")
    if args.on_interrupt == "exit":
        sys.exit(args.exit)


for n, line in enumerate(lines):
    out.write(line)
    out.flush()
    if args.interrupt and n == 0 and args.senders:
        await_senders((signal.SIGINT,), args.interrupt, 20)
        if args.on_interrupt == "exit":
            sys.exit(args.exit)
        if args.on_interrupt == "die":
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
    elif args.interrupt and n == 0:
        if args.on_interrupt != "die":
            signal.signal(signal.SIGINT, interrupted)
        else:  # Python's own handler, also when SIGINT came ignored (a job started with &)
            signal.signal(signal.SIGINT, signal.default_int_handler)
        open(args.interrupt, "w").close()
        deadline = time.monotonic() + 20
        while os.path.getsize(args.interrupt) == 0:
            if time.monotonic() > deadline:
                sys.exit(99)  # never interrupted
            time.sleep(0.02)
        time.sleep(0.5)
if args.hold:
    signal.alarm(60)  # never outlive a broken test
    if args.hold_log and args.senders:
        await_senders((signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT), args.hold_log, 60)
        sys.exit(args.exit)
    if args.hold_log:
        open(args.hold_log, "w").close()
        while not held:
            time.sleep(0.02)
        time.sleep(0.5)
        sys.exit(args.exit)
    signal.pause()
if args.signal:
    os.kill(os.getpid(), getattr(signal, args.signal))
sys.exit(args.exit)
