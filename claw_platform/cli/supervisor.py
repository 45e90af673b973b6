"""Supervised child processes for `claw up`: restart with backoff, stop with a deadline.

Each child runs in its own session (so its own process group): Ctrl+C in the terminal
reaches only `claw up`, which then stops the children in order, and a child's
grandchildren (django-q's sentinel and pool) can be killed as a group if they linger.
Django is never imported here; the supervising process stays small.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

MIN_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0
# A child that stayed up this long is considered healthy again: its backoff resets.
STABLE_AFTER_SECONDS = 60.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM if `claw up` itself is killed (-9), so
    no orphan keeps the port or the database busy. Linux only; a no-op elsewhere."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class ChildSpec:
    name: str
    argv: list[str]
    env: dict[str, str] | None = None


@dataclass
class Child:
    spec: ChildSpec
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    backoff: float = MIN_BACKOFF_SECONDS
    restart_at: float | None = None
    restarts: int = 0
    pids_seen: set[int] = field(default_factory=set)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Supervisor:
    """Start children, restart the ones that die, stop them all within a deadline."""

    def __init__(
        self,
        specs: list[ChildSpec],
        *,
        log: Callable[[str], None] | None = None,
        min_backoff: float = MIN_BACKOFF_SECONDS,
        max_backoff: float = MAX_BACKOFF_SECONDS,
        stable_after: float = STABLE_AFTER_SECONDS,
    ) -> None:
        self.children = [Child(spec, backoff=min_backoff) for spec in specs]
        self._log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff
        self._stable_after = stable_after
        self._stopping = False

    def start(self) -> None:
        for child in self.children:
            self._spawn(child)

    def pids(self) -> dict[str, int | None]:
        return {child.spec.name: child.pid if child.is_running() else None for child in self.children}

    def poll(self) -> None:
        """Notice dead children and restart them when their backoff has passed."""
        if self._stopping:
            return
        now = time.monotonic()
        for child in self.children:
            if child.restart_at is not None:
                if now >= child.restart_at:
                    child.restart_at = None
                    child.restarts += 1
                    self._spawn(child)
                continue
            if child.process is None or child.process.poll() is None:
                continue
            code = child.process.returncode
            self._reap_group(child)
            if now - child.started_at >= self._stable_after:
                child.backoff = self._min_backoff
            delay = child.backoff
            child.backoff = min(child.backoff * 2, self._max_backoff)
            child.restart_at = now + delay
            self._log(f"claw: {child.spec.name} exited with code {code}; restarting in {delay:g} s")

    def stop(self, grace: float = 6.0) -> None:
        """SIGTERM each child, wait up to ``grace`` seconds, then SIGKILL what is left,
        including anything still in the children's process groups."""
        self._stopping = True
        running = [c for c in self.children if c.is_running()]
        tree: list[psutil.Process] = []
        for child in running:
            assert child.process is not None
            try:
                leader = psutil.Process(child.process.pid)
                tree += [leader, *leader.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
            # The leader alone: django-q's cluster stops its sentinel and pool in order
            # on SIGTERM, whereas its sentinel dies on the spot if signalled directly.
            _signal(child.process.pid, signal.SIGTERM)
        _, alive = psutil.wait_procs(tree, timeout=grace)
        for proc in alive:
            self._log(f"claw: process {proc.pid} did not stop within {grace:g} s; killing it")
        for child in self.children:
            if child.process is not None:
                self._reap_group(child)
        for proc in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(alive, timeout=2)
        for child in self.children:
            if child.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.process.wait(timeout=1)

    def _spawn(self, child: Child) -> None:
        child.process = subprocess.Popen(
            child.spec.argv,
            env=child.spec.env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        child.started_at = time.monotonic()
        child.pids_seen.add(child.process.pid)

    def _reap_group(self, child: Child) -> None:
        """SIGKILL whatever is left in a child's process group (its pgid is its pid)."""
        assert child.process is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.process.pid, signal.SIGKILL)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)
