"""Running one shell command for a tool (T15).

``execution`` per tool: ``sandbox`` (bubblewrap only; refused where it does not work),
``host`` (confined on the host) or ``either`` (the sandbox where it works, else the
host). Both modes give the command:

- an environment built from nothing (:mod:`tools_app.guards.environment`): none of
  the product's secrets, whatever the operator exported;
- the workspace as its home and working directory, and the only place it can write;
- its own session (process group), killed whole on timeout or cancel;
- limits: file size (the workspace quota), core dumps off.

The **sandbox** (``bwrap``): new user, pid, ipc, uts, cgroup and -- unless the
agent allows it -- network namespaces; ``/usr`` and the system library directories
read-only, a handful of ``/etc`` files, a private ``/proc``, ``/dev`` and ``/tmp``,
the workspace bound at ``/workspace``; all capabilities dropped.

The **host** mode runs ``bash`` directly under Landlock when the kernel has it
(:mod:`tools_app.sandbox.landlock`): the workspace writable, system directories
readable, nothing else, and no TCP unless allowed.

Whether bwrap works is found out once per process by running ``true`` in it (it may
be installed but unusable, e.g. where unprivileged user namespaces are off).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import resource
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools_app.guards.environment import shell_environment
from tools_app.sandbox.landlock import confinement, landlock_abi

SANDBOX_HOME = "/workspace"
SANDBOX_TMP = "/tmp"  # noqa: S108 -- a private tmpfs inside the sandbox
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
# /etc entries programs need to start and look names up; none holds a secret.
ETC_FILES = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/mime.types",
    "/etc/magic",
    "/etc/bash.bashrc",
)
NETWORK_ETC_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/ssl", "/etc/ca-certificates", "/etc/gai.conf")
HOST_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/tty")
READ_CHUNK = 65_536


class SandboxUnavailable(RuntimeError):
    """``execution=sandbox`` was asked for where bubblewrap cannot run."""


@dataclass(frozen=True)
class ShellResult:
    exit_code: int | None
    output: str
    timed_out: bool
    cancelled: bool
    mode: str  # "sandbox" or "host"
    truncated_bytes: int = 0
    duration_ms: int = 0


@functools.cache
def bwrap_path() -> str | None:
    return shutil.which("bwrap")


_bwrap_probe: dict[str, bool] = {}


def sandbox_available() -> bool:
    """Does bubblewrap run here? Probed once per process (cached)."""
    if "ok" not in _bwrap_probe:
        binary = bwrap_path()
        ok = False
        if binary is not None:
            argv = [binary, *_bwrap_args(Path("/"), network=False, probe=True), "/bin/true"]
            try:
                ok = subprocess.run(argv, capture_output=True, timeout=10, check=False).returncode == 0
            except (OSError, subprocess.SubprocessError):
                ok = False
        _bwrap_probe["ok"] = ok
    return _bwrap_probe["ok"]


def choose_mode(execution: str) -> str:
    """``sandbox`` or ``host`` for a tool's ``execution`` setting."""
    if execution == "host":
        return "host"
    if sandbox_available():
        return "sandbox"
    if execution == "sandbox":
        raise SandboxUnavailable(
            "This agent's shell runs only in a sandbox, and the sandbox (bubblewrap) is not available "
            "on this server."
        )
    return "host"


def _bwrap_args(workspace: Path, *, network: bool, probe: bool = False) -> list[str]:
    args = ["--die-with-parent", "--new-session", "--unshare-all", "--cap-drop", "ALL"]
    if network:
        args.append("--share-net")
    args += ["--hostname", "sandbox"]
    for directory in SYSTEM_DIRS:
        path = Path(directory)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), directory]
        elif path.is_dir():
            args += ["--ro-bind", directory, directory]
    for entry in ETC_FILES + (NETWORK_ETC_FILES if network else ()):
        args += ["--ro-bind-try", entry, entry]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", SANDBOX_TMP]
    if not probe:
        args += ["--bind", str(workspace), SANDBOX_HOME, "--chdir", SANDBOX_HOME]
    args.append("--clearenv")
    return args


def _limits(file_size_bytes: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_bytes, file_size_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _host_preexec(workspace: Path, *, network: bool, file_size_bytes: int) -> Callable[[], None]:
    limits = _limits(file_size_bytes)
    readable = [*SYSTEM_DIRS, *ETC_FILES, *(NETWORK_ETC_FILES if network else ())]
    landlock = confinement(
        writable=[str(workspace), "/dev/null", "/dev/tty"],
        readable=[*readable, *HOST_DEVICES],
        allow_network=network,
    )

    def apply() -> None:
        limits()
        if landlock is not None:
            landlock()

    return apply


def host_confinement() -> str:
    """How host-run commands are confined here (for doctor output and the bench)."""
    abi = landlock_abi()
    return f"landlock ABI {abi}" if abi else "environment and limits only (no Landlock)"


async def run_command(
    command: str,
    workspace: Path,
    *,
    mode: str,
    time_limit: float,
    network: bool = False,
    max_output_bytes: int = 100_000,
    file_size_bytes: int = 500_000_000,
    cancel_event: asyncio.Event | None = None,
) -> ShellResult:
    """Run ``command`` with ``bash -c`` in ``mode`` and collect its merged output."""
    started = time.perf_counter()
    tmp = workspace / ".tmp"
    tmp.mkdir(exist_ok=True)
    if mode == "sandbox":
        binary = bwrap_path()
        if binary is None:
            raise SandboxUnavailable("bubblewrap is not installed")
        env_args: list[str] = []
        for name, value in shell_environment(SANDBOX_HOME, tmpdir=SANDBOX_TMP).items():
            env_args += ["--setenv", name, value]
        argv = [binary, *_bwrap_args(workspace, network=network), *env_args, "/bin/bash", "-c", command]
        env: dict[str, str] = {"PATH": "/usr/bin:/bin"}
        preexec = _limits(file_size_bytes)
    else:
        argv = ["/bin/bash", "-c", command]
        env = shell_environment(str(workspace), tmpdir=str(tmp))
        preexec = _host_preexec(workspace, network=network, file_size_bytes=file_size_bytes)
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=str(workspace),
        env=env,
        start_new_session=True,
        preexec_fn=preexec,
    )
    kept = bytearray()
    dropped = 0

    async def collect() -> None:
        nonlocal dropped
        assert process.stdout is not None
        while chunk := await process.stdout.read(READ_CHUNK):
            room = max_output_bytes - len(kept)
            kept.extend(chunk[:room])
            dropped += max(0, len(chunk) - room)
        await process.wait()

    reader = asyncio.ensure_future(collect())
    waiters: set[asyncio.Future[Any]] = {reader}
    stopper = asyncio.ensure_future(cancel_event.wait()) if cancel_event is not None else None
    if stopper is not None:
        waiters.add(stopper)
    timed_out = cancelled = False
    try:
        done, _ = await asyncio.wait(waiters, timeout=time_limit, return_when=asyncio.FIRST_COMPLETED)
        if reader not in done:
            timed_out = stopper is None or stopper not in done
            cancelled = not timed_out
            _kill_group(process.pid)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(reader, 5)
    finally:
        if stopper is not None:
            stopper.cancel()
        if not reader.done():
            _kill_group(process.pid)
            reader.cancel()
    return ShellResult(
        exit_code=process.returncode,
        output=kept.decode("utf-8", errors="replace"),
        timed_out=timed_out,
        cancelled=cancelled,
        mode=mode,
        truncated_bytes=dropped,
        duration_ms=int((time.perf_counter() - started) * 1000),
    )


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
