"""Running one shell command for a tool (T15, issue 21).

Where it runs is the operator's call first (:mod:`tools_app.sandbox.operator`),
then the tool's ``execution``: ``sandbox`` (bubblewrap only), ``host`` (confined on
the host) or ``either`` (the sandbox where it works, else the host). Without
``CLAW_SHELL_HOST=allow`` every command runs in the sandbox, and where bubblewrap
does not work the shell is refused -- on the host, Landlock confines files and TCP
but not a connection to a Unix socket such as the database's. Both modes give the
command:

- an environment built from nothing (:mod:`tools_app.guards.environment`): none of
  the product's secrets, whatever the operator exported;
- the workspace as its home and working directory, and the only place it can write;
- its own session (process group), killed whole on timeout or cancel;
- limits: file size (the workspace quota), core dumps off.

The **sandbox** (``bwrap``): new user, pid, ipc, uts, cgroup and network
namespaces; ``/usr`` and the system library directories read-only, a handful of
``/etc`` files, a private ``/proc``, ``/dev`` and ``/tmp``, the workspace bound at
``/workspace``; all capabilities dropped. The product's own state (var directory,
database socket, keys, checkout) is covered where it lies inside a bound directory
(:mod:`tools_app.sandbox.protected`). With network, the namespace is still its own,
given outbound access only by slirp4netns (:mod:`tools_app.sandbox.network`).

The **host** mode (operator opt-in, weaker) runs ``bash`` directly under Landlock
when the kernel has it (:mod:`tools_app.sandbox.landlock`): the workspace
writable, system directories readable, nothing else, and no TCP; never with
network, which would be the host's own.

Whether bwrap works is found out once per process by running ``true`` in it (it may
be installed but unusable, e.g. where unprivileged user namespaces are off).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools_app.guards.environment import shell_environment
from tools_app.sandbox.landlock import confinement, landlock_abi
from tools_app.sandbox.network import (
    RESOLV_CONF,
    NetworkUnavailable,
    SandboxNetwork,
    attach_network,
    missing_tools_text,
    network_tools,
    read_pipe,
)
from tools_app.sandbox.operator import HOST_SETTING, capped_execution, host_shell_allowed
from tools_app.sandbox.protected import hiding_arguments

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
# /etc/resolv.conf is written for the sandbox (slirp4netns's resolver), not bound.
NETWORK_ETC_FILES = ("/etc/hosts", "/etc/ssl", "/etc/ca-certificates", "/etc/gai.conf")
HOST_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/tty")
READ_CHUNK = 65_536


class SandboxUnavailable(RuntimeError):
    """The command cannot run confined as it must be; its text says why, for the
    model and the person reading the chat."""


NO_SANDBOX = (
    "The shell is not available on this server: it has no working sandbox (bubblewrap), "
    f"and the operator has not allowed commands to run on the host ({HOST_SETTING}). Nothing was run."
)
SANDBOX_ONLY = (
    "This agent's shell runs only in a sandbox, and the sandbox (bubblewrap) is not available "
    "on this server. Nothing was run."
)
NO_HOST_NETWORK = (
    "This agent's shell has network access, which a command on the host cannot be given "
    "(it would reach the host's own services). Nothing was run."
)
NO_SANDBOX_NETWORK = (
    "This agent's shell has network access, but this server cannot give the sandbox a network "
    "of its own ({reason}). Nothing was run."
)


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
    """``sandbox`` or ``host`` for a tool's ``execution`` setting under the
    operator's cap; :class:`SandboxUnavailable` when neither may run."""
    wanted = capped_execution(execution)
    if wanted == "host":
        return "host"
    if sandbox_available():
        return "sandbox"
    if wanted == "sandbox":
        raise SandboxUnavailable(SANDBOX_ONLY if host_shell_allowed() else NO_SANDBOX)
    return "host"


def _bwrap_args(workspace: Path, *, network: bool, probe: bool = False) -> list[str]:
    # --unshare-all includes the network: with network too, the namespace is the
    # sandbox's own (attach_network gives it outbound access), never the host's.
    args = ["--die-with-parent", "--new-session", "--unshare-all", "--cap-drop", "ALL"]
    args += ["--hostname", "sandbox"]
    bound: list[str] = []
    for directory in SYSTEM_DIRS:
        path = Path(directory)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), directory]
        elif path.is_dir():
            args += ["--ro-bind", directory, directory]
            bound.append(directory)
    for entry in ETC_FILES + (NETWORK_ETC_FILES if network else ()):
        args += ["--ro-bind-try", entry, entry]
        if Path(entry).is_dir():
            bound.append(entry)
    args += hiding_arguments(bound)
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


_network_probe: dict[str, str] = {}


def sandbox_network_problem() -> str:
    """Why a networked sandbox cannot be made here, ``""`` when it can. Probed
    once per process by running ``true`` in one (for doctor)."""
    if "problem" not in _network_probe:
        _network_probe["problem"] = _probe_network()
    return _network_probe["problem"]


def _probe_network() -> str:
    if not sandbox_available():
        return "bubblewrap does not work"
    if network_tools() is None:
        return f"missing: {missing_tools_text()}"
    with tempfile.TemporaryDirectory(prefix="claw-network-probe-") as tmp:
        workspace = Path(tmp)

        async def probe() -> ShellResult:
            return await run_command("true", workspace, mode="sandbox", time_limit=15, network=True)

        try:
            # Its own thread and event loop: callable from sync and async code alike.
            with ThreadPoolExecutor(1) as pool:
                result = pool.submit(asyncio.run, probe()).result()
        except SandboxUnavailable as exc:
            return str(exc)
        except OSError as exc:
            return f"bwrap did not start ({type(exc).__name__})"
    return "" if result.exit_code == 0 else f"a test command failed: {result.output.strip()[:200]}"


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
    """Run ``command`` with ``bash -c`` in ``mode`` and collect its merged output.

    Raises :class:`SandboxUnavailable` when it cannot run as confined as it must
    (nothing ran), ``OSError`` when it could not be started."""
    started = time.perf_counter()
    tmp = workspace / ".tmp"
    tmp.mkdir(exist_ok=True)
    # bwrap's side of the pipes a networked sandbox is set up through.
    handed: list[int] = []
    info_read = block_write = -1
    if mode == "sandbox":
        binary = bwrap_path()
        if binary is None:
            raise SandboxUnavailable(NO_SANDBOX)
        extra: list[str] = []
        if network:
            info_read, info_write = os.pipe()
            block_read, block_write = os.pipe()
            resolv_read, resolv_write = os.pipe()
            os.write(resolv_write, RESOLV_CONF)
            os.close(resolv_write)
            handed = [info_write, block_read, resolv_read]
            extra = ["--info-fd", str(info_write), "--block-fd", str(block_read)]
            extra += ["--ro-bind-data", str(resolv_read), "/etc/resolv.conf"]
        env_args: list[str] = []
        for name, value in shell_environment(SANDBOX_HOME, tmpdir=SANDBOX_TMP).items():
            env_args += ["--setenv", name, value]
        argv = [
            binary,
            *_bwrap_args(workspace, network=network),
            *extra,
            *env_args,
            "/bin/bash",
            "-c",
            command,
        ]
        env: dict[str, str] = {"PATH": "/usr/bin:/bin"}
        preexec = _limits(file_size_bytes)
    else:
        if network:
            raise SandboxUnavailable(NO_HOST_NETWORK)
        argv = ["/bin/bash", "-c", command]
        env = shell_environment(str(workspace), tmpdir=str(tmp))
        preexec = _host_preexec(workspace, network=False, file_size_bytes=file_size_bytes)
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=str(workspace),
            env=env,
            start_new_session=True,
            preexec_fn=preexec,
            pass_fds=handed,
        )
    except BaseException:
        _close(info_read, block_write)
        raise
    finally:
        _close(*handed)
    # From here _child_pid owns info_read.
    sandbox_network: SandboxNetwork | None = None
    if network:
        try:
            sandbox_network = await attach_network(await _child_pid(info_read))
            os.write(block_write, b"1")  # bwrap now runs the command
        except BaseException as exc:
            # Nothing may run half set up, nor be left running (a cancel too).
            _kill_group(process.pid)
            await process.wait()
            if sandbox_network is not None:
                await sandbox_network.close()
            if not isinstance(exc, (NetworkUnavailable, OSError)):
                raise
            reason = str(exc) if isinstance(exc, NetworkUnavailable) else type(exc).__name__
            raise SandboxUnavailable(NO_SANDBOX_NETWORK.format(reason=reason)) from None
        finally:
            _close(block_write)
    try:
        return await _collect(process, started, mode, time_limit, max_output_bytes, cancel_event)
    finally:
        if sandbox_network is not None:
            await sandbox_network.close()


async def _child_pid(info_read: int) -> int:
    """The sandbox's first process, from bwrap's ``--info-fd`` JSON (takes the fd over)."""

    def parsed(data: bytes) -> bool:
        try:
            return "child-pid" in json.loads(data)
        except ValueError:
            return False

    try:
        async with asyncio.timeout(10):
            data = await read_pipe(info_read, complete=parsed)
    except TimeoutError:
        raise NetworkUnavailable("bwrap did not report the sandbox") from None
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        raise NetworkUnavailable("bwrap stopped before the sandbox was made") from None


async def _collect(
    process: asyncio.subprocess.Process,
    started: float,
    mode: str,
    time_limit: float,
    max_output_bytes: int,
    cancel_event: asyncio.Event | None,
) -> ShellResult:
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


def _close(*fds: int) -> None:
    for fd in fds:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
