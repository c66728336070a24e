"""Child processes of a cluster: spawn, liveness, kill, logs.

Every daemon, proxy and sidecar runs in its own process group with its output in a
log file. An in-process child dies with its parent (``PR_SET_PDEATHSIG``) unless it
is started ``detached`` (``pulsarcast cluster up``). A kill checks first that the
pid is still the process started (its command line or environment names a
``marker``, such as its repo), so a recycled pid is never signalled.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

__all__ = ["CHILDREN", "alive", "child_env", "kill_group", "log_tail", "ours", "spawn"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(cmd: Sequence[str], *, env: dict[str, str], log: Path, detached: bool) -> int:
    """Start ``cmd`` in its own process group, output to ``log``; return its pid."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(cmd),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=None if detached else _die_with_parent,
        )
    CHILDREN[proc.pid] = proc
    return proc.pid


# Popen objects of the children of this process, so that they can be reaped.
CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def alive(pid: int) -> bool:
    child = CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def ours(pid: int, marker: str) -> bool:
    """Whether ``pid`` is still the process we started (its command or env names ``marker``)."""
    if pid in CHILDREN:
        return alive(pid)
    try:
        proc = psutil.Process(pid)
        if marker in " ".join(proc.cmdline()):
            return True
        return marker in proc.environ().values()
    except psutil.Error:
        return False


def kill_group(pid: int, marker: str, grace: float = 5.0) -> None:
    """SIGTERM the process group of ``pid``, SIGKILL it after ``grace`` seconds; reap."""
    if not ours(pid, marker):
        CHILDREN.pop(pid, None)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.05)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    child = CHILDREN.pop(pid, None)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=5)
    else:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and alive(pid):
            time.sleep(0.05)


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return "\n".join("    " + ln for ln in tail) or "    (empty log)"


def child_env(repo: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["IPFS_TELEMETRY"] = "off"
    # With port reuse two daemons dialling each other at the same moment on
    # loopback can meet in a TCP simultaneous open, and the TLS handshake
    # then fails on both sides ("unexpected handshake message").  Dial from
    # ephemeral ports instead.
    env.setdefault("LIBP2P_TCP_REUSEPORT", "false")
    env.setdefault("GOLOG_LOG_LEVEL", "error")
    if repo is not None:
        env["IPFS_PATH"] = str(repo)
    return env
