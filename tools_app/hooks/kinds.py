"""Running one hook of each kind (H2): shell command, signed webhook, Python callable.

Each returns the hook's raw answer (parsed by ``tools_app.hooks.outcomes``) or raises
:class:`~tools_app.hooks.outcomes.HookFailed`; the runner applies the timeout and the
hook's on-error setting.

- Shell: ``/bin/sh -c <command>`` in the tenant's hook directory, the event as JSON on
  stdin, ``CLAW_HOOK_EVENT`` / ``CLAW_HOOK_NAME`` in an environment built from scratch
  (nothing of the product's own -- no SECRET_KEY, DATABASE_URL or provider keys), its
  own process group killed on timeout; stdout is the answer, a non-zero exit a failure.
- Webhook: a JSON POST through the SSRF guard, signed ``X-Claw-Signature:
  sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`` with ``X-Claw-Timestamp``
  (seconds) so a receiver can refuse replays; a 2xx body is the answer (empty: allow).
- Python: a registered callable (``tools_app.hooks.callables``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from tools_app.guards.ssrf import BlockedDestination, SsrfGuard
from tools_app.hooks.outcomes import HookFailed
from tools_app.net.fetch import guarded_request

MAX_ANSWER_BYTES = 1_000_000
SHELL_PATH = "/usr/local/bin:/usr/bin:/bin"


def _decode_answer(raw: bytes, *, source: str) -> Any:
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise HookFailed(f"{source} is not JSON: {text[:120]!r}") from None


# ------------------------------------------------------------------------- shell


def shell_environment(event: str, hook_name: str, tenant_id: str, home: Path) -> dict[str, str]:
    """The whole environment of a shell hook: made from scratch, never inherited."""
    return {
        "PATH": SHELL_PATH,
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "CLAW_HOOK_EVENT": event,
        "CLAW_HOOK_NAME": hook_name,
        "CLAW_TENANT_ID": tenant_id,
    }


async def run_shell_hook(command: str, body: bytes, *, env: Mapping[str, str], cwd: Path) -> Any:
    """Run the command; the caller's timeout (cancellation) kills its process group."""
    await asyncio.to_thread(cwd.mkdir, parents=True, exist_ok=True)
    try:
        process = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,  # its own process group: a timeout kills its children too
        )
    except OSError as exc:
        raise HookFailed(f"could not start the command ({exc.strerror or type(exc).__name__})") from None
    try:
        stdout, stderr = await _communicate(process, body)
    except BaseException:
        _kill_group(process)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(process.wait(), 5)
        raise
    if process.returncode != 0:
        detail = stderr.decode("utf-8", errors="replace").strip()[:200]
        raise HookFailed(
            f"the command exited with status {process.returncode}" + (f": {detail}" if detail else "")
        )
    return _decode_answer(stdout, source="the command's output")


async def _communicate(process: asyncio.subprocess.Process, body: bytes) -> tuple[bytes, bytes]:
    assert process.stdin
    assert process.stdout
    assert process.stderr

    async def feed() -> None:
        assert process.stdin
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            process.stdin.write(body)
            await process.stdin.drain()
        process.stdin.close()

    async def read_capped(stream: asyncio.StreamReader) -> bytes:
        data = await stream.read(MAX_ANSWER_BYTES + 1)
        if len(data) > MAX_ANSWER_BYTES:
            raise HookFailed(f"the command printed more than {MAX_ANSWER_BYTES} bytes")
        while await stream.read(65536):
            pass  # drain, so the command never blocks on a full pipe
        return data

    _, stdout, stderr = await asyncio.gather(feed(), read_capped(process.stdout), read_capped(process.stderr))
    await process.wait()
    return stdout, stderr


def _kill_group(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


# ----------------------------------------------------------------------- webhook


def sign_webhook(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>`` over ``"<timestamp>.<body>"``: what X-Claw-Signature carries."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


async def run_webhook_hook(
    client: httpx.AsyncClient,
    guard: SsrfGuard,
    url: str,
    secret: str,
    event: str,
    hook_name: str,
    body: bytes,
) -> Any:
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "ClawPlatform-Hook/1",
        "X-Claw-Event": event,
        "X-Claw-Hook": hook_name,
        "X-Claw-Timestamp": timestamp,
        "X-Claw-Signature": sign_webhook(secret, timestamp, body),
    }
    try:
        response = await guarded_request(
            client,
            guard,
            "POST",
            url,
            headers=headers,
            content=body,
            max_bytes=MAX_ANSWER_BYTES,
            max_redirects=0,
        )
    except BlockedDestination as exc:
        raise HookFailed(exc.message) from None
    except httpx.TimeoutException:
        raise TimeoutError from None
    except httpx.HTTPError as exc:
        raise HookFailed(f"the webhook could not be reached ({type(exc).__name__})") from None
    except Exception as exc:  # TooManyRedirects: a hook endpoint must answer, not redirect
        raise HookFailed(f"the webhook failed ({exc})") from None
    if not 200 <= response.status < 300:
        raise HookFailed(f"the webhook answered HTTP {response.status}")
    if response.truncated:
        raise HookFailed(f"the webhook answered more than {MAX_ANSWER_BYTES} bytes")
    return _decode_answer(response.body, source="the webhook's answer")
