#!/usr/bin/env python
"""Live streaming under load: the runs issue's figures, against the real processes.

    .venv/bin/python bench/stream/run.py [--streams 200] [--idle 1000] [--layer postgres|redis]
                                         [--broker orm|redis] [--tokens 200] [--interval 0.025]
                                         [--web 1] [--workers 1] [--compare]

Starts an embedded PostgreSQL (or uses DATABASE_URL), ``--web`` Daphne processes (the
sockets spread over them in turn) and ``--workers`` ``claw_worker`` processes, and a token server whose tokens carry the time they were written
(``token_server.py``). Then, from one client process:

1. opens ``--idle`` WebSockets that just stay open, and ``--streams`` more, one per
   session, each of which sends a message at the same moment;
2. every token that reaches a client is timed from the moment the LLM server wrote
   it: the **token relay latency** (target p50 < 5 ms, p99 < 50 ms at 200 streams);
3. **queue wait**: from sending the message to its run starting (target p50 < 20 ms,
   p95 < 250 ms with 200 concurrent runs), read from the database, with its two parts:
   to the run's creation (the web process's transaction) and from there to a worker
   starting it (figures before 2026-11-25 were that second part only); then from the
   run's start to its first text. Measured twice: for the burst (all the messages at
   once), and for ``--probes`` messages sent one at a time, 150 ms apart, while every
   stream runs (a message arriving on a loaded system; their runs answer in two tokens).
   Before the burst, every stream socket sends a message the server refuses at once
   (no text), all together: its round trip is the **floor** of the burst's queue wait,
   the frames' way into Daphne's consumers and back with no database work;
4. **sockets held** by the one Daphne process (target >= 1,000 idle + 200 streaming):
   how many opened, how many were still open at the end, Daphne's RSS;
5. **memory per active run**: the worker's RSS while the runs stream, minus idle,
   divided by the number of runs (with ``--workers``, the first worker's, divided by
   the streams it ran; how the streams split between the workers is printed); and
   PostgreSQL's load (commits/s) meanwhile;
6. **CPU**: each process's share while streaming, and in the steady state (from the
   moment every stream has relayed a token until the first one ends: no run starts
   or finishes) the CPU time each spends per relayed token, and the relay latency
   then. Everything shares the machine's cores, the benchmark's own client and token
   server included, so a process that gets cheaper leaves more for the others. ``--timeline`` prints the
   relay latency second by second (start, steady state and end apart);
7. **the machine**: how busy its cores were in the steady state, and one core's speed
   at plain Python, to compare figures taken on different machines. Where a token's
   CPU goes inside the worker, stage by stage and without the noise of the other
   processes, is ``token_cost.py``'s.

``--profile DIR`` writes py-spy folded stacks of Daphne and the worker, for the burst
of run starts and for the steady state (py-spy is not a dependency: pip install it).

``--layer redis`` / ``--broker redis`` use the machine's Redis at 127.0.0.1:6379
(the Redis channel layer, ``claw_platform.redis_layer``, and django-q2's Redis broker).
``--compare`` runs the whole benchmark once per layer (PostgreSQL, then Redis) with the
other options and prints delivered runs and tokens, ``resync`` frames (a socket told it
lost frames), relay latency and CPU per token side by side; the scale-out figures are
``--compare --streams 200 --idle 0 --web 2 --workers 2 --tokens 600``.

The benchmark's own client and token server share the two cores with the product,
which in production they would not: by default they run on uvloop
(``--harness-loop uvloop``), which takes about a fifth less of the cores from the
processes measured; ``--harness-loop asyncio`` gives the conditions of the figures
measured before that choice.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from claw_platform.cli.up import web_server_command  # noqa: E402
from claw_platform.heap import freeze_startup_heap  # noqa: E402

MB = 1024 * 1024
TOKEN = re.compile(r"<(\d{16})>")
CHUNK_FRAME = '{"type":"chunk"'  # the worker's compact JSON (channels_app.relay)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


# ------------------------------------------------------------------- set-up


def setup_django(tmp: Path) -> Any:
    os.environ.setdefault("CLAW_VAR_DIR", str(tmp / "var"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claw_platform.settings")
    db = None
    if not os.environ.get("DATABASE_URL"):
        from claw_platform.embedded_db import start_embedded_database

        db = start_embedded_database(tmp / "pgdata", database="claw_bench_stream")
        os.environ["DATABASE_URL"] = db.url
        os.environ["DATABASE_OWNER_URL"] = db.owner_url  # migrate runs as the owner
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
    except BaseException:
        if db is not None:  # the server this started does not outlive a failed set-up
            db.stop()
        raise
    return db


def make_fixtures(token_url: str, sessions: int) -> tuple[str, list[str]]:
    """A tenant, its owner (signed in: the session cookie is returned) and an agent
    whose provider is the token server; ``sessions`` chat sessions."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from agents.actions.config import do_create_agent, do_create_model_profile, do_create_provider
    from agents.actions.conversation import do_create_session
    from claw_platform.tenancy.actions import do_add_member, do_create_tenant
    from claw_platform.tenancy.models import Role

    suffix = str(int(time.time()))
    tenant = do_create_tenant("Bench", slug=f"bench-{suffix}")
    user = get_user_model().objects.create_user(username=f"bench-{suffix}", password="unused-password-1")
    do_add_member(tenant, user, Role.OWNER)
    provider = do_create_provider(
        tenant, name="tokens", kind="openai_compatible", base_url=f"{token_url}/v1", api_key="k"
    )
    model = do_create_model_profile(provider, model="bench", context_window=128_000, max_output_tokens=1024)
    agent = do_create_agent(tenant, slug="streamer", name="Streamer", model=model)
    ids = [str(do_create_session(agent, user=user, title=f"s{i}").pk) for i in range(sessions)]
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    return str(store.session_key), ids


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        args,
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def process_tree(pid: int) -> list[psutil.Process]:
    """The process and its descendants (none if it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_rss(pid: int) -> int:
    try:
        return sum(p.memory_info().rss for p in process_tree(pid))
    except psutil.NoSuchProcess:
        return 0


def postgres_cpu_seconds() -> float:
    total = 0.0
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            if proc.info["name"] in ("postgres", "postmaster") or "postgres:" in " ".join(
                proc.info["cmdline"] or []
            ):
                times = proc.cpu_times()
                total += times.user + times.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU time (user + system) used so far by each named process and its children,
    and by PostgreSQL's processes together."""
    used: dict[str, float] = {}
    for name, pid in pids.items():
        try:
            root = psutil.Process(pid)
            # This process's children are PostgreSQL's (counted below).
            family = [root] if pid == os.getpid() else [root, *root.children(recursive=True)]
            used[name] = sum(sum(p.cpu_times()[:2]) for p in family)
        except psutil.NoSuchProcess:
            used[name] = 0.0
    used["postgres"] = postgres_cpu_seconds()
    return used


def machine_busy(before: Any, after: Any) -> str:
    """How busy all the cores were between two ``psutil.cpu_times()`` (a process can
    wait for a core while the average shows some idle: see the per-process shares)."""
    spent = {name: getattr(after, name) - getattr(before, name) for name in after._fields}
    total = sum(spent.values()) or 1e-9
    idle = spent.get("idle", 0.0) + spent.get("iowait", 0.0)
    steal = spent.get("steal", 0.0)
    return (
        f"{(total - idle) / total * 100:.0f}% busy over its {os.cpu_count()} cores "
        f"({spent.get('user', 0) / total * 100:.0f}% user, {spent.get('system', 0) / total * 100:.0f}% system, "
        f"{steal / total * 100:.0f}% stolen)"
    )


def machine_speed() -> str:
    """One core's speed at plain Python, to compare figures taken on different
    machines. (A loop in a function: the same loop typed at the interpreter's top
    level takes ~2.5x longer, its variables being globals.)"""
    started = time.perf_counter()
    total = 0
    for n in range(10_000_000):
        total += n
    return f"a 10M-addition Python loop takes {time.perf_counter() - started:.2f} s"


def commits() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def wait_http(url: str, timeout: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code < 500:
                return
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer within {timeout:.0f} s")


# ------------------------------------------------------------------- client


@dataclass
class StreamResult:
    latencies_ms: list[float] = field(default_factory=list)
    received_at: list[float] = field(default_factory=list)  # wall clock, one per latency
    first_chunk_ms: float | None = None  # from sending the message to its first text
    first_chunk_wall: float | None = None  # when it arrived (wall clock)
    completed: bool = False
    failed: str = ""
    frames: int = 0
    resyncs: int = 0  # the server said it lost frames to this socket (``resync``)


async def client(
    urls: list[str],
    cookie: str,
    stream_ids: list[str],
    idle_ids: list[str],
    idle: int,
    worker_pid: int,
    pids: dict[str, int],
    limit: float,
    profile: Path | None = None,
    probe_ids: list[str] | None = None,
) -> dict[str, Any]:
    import aiohttp

    headers = {"Origin": urls[0], "Cookie": f"sessionid={cookie}"}
    ws_urls = [url.replace("http://", "ws://") for url in urls]
    opened = 0  # sockets go to the Daphne processes in turn
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as http:

        async def open_socket(session_id: str) -> Any:
            nonlocal opened
            ws_url = ws_urls[opened % len(ws_urls)]
            opened += 1
            # A burst of connects can overflow the listen backlog: retry like a browser.
            for attempt in range(5):
                try:
                    return await http.ws_connect(f"{ws_url}/ws/sessions/{session_id}/", heartbeat=None)
                except (aiohttp.ClientError, OSError):
                    if attempt == 4:
                        raise
                    await asyncio.sleep(0.2 * (attempt + 1))
            raise AssertionError("unreachable")

        idle_sockets: list[Any] = []
        idle_failures = 0
        for start_at in range(0, idle, 50):
            batch = await asyncio.gather(
                *(
                    open_socket(idle_ids[i % len(idle_ids)])
                    for i in range(start_at, min(idle, start_at + 50))
                ),
                return_exceptions=True,
            )
            for item in batch:
                if isinstance(item, BaseException):
                    idle_failures += 1
                else:
                    idle_sockets.append(item)
        stream_sockets: list[Any] = []
        for start_at in range(0, len(stream_ids), 50):
            stream_sockets += await asyncio.gather(
                *(open_socket(sid) for sid in stream_ids[start_at : start_at + 50])
            )
        probe_sockets = [await open_socket(sid) for sid in probe_ids or []]
        probes_sent: dict[str, float] = {}  # session -> wall time its message was sent
        worker_idle_rss = tree_rss(worker_pid)
        results = [StreamResult() for _ in stream_sockets]
        peak_worker_rss = 0

        async def watch_worker() -> None:
            nonlocal peak_worker_rss
            while True:
                peak_worker_rss = max(peak_worker_rss, tree_rss(worker_pid))
                await asyncio.sleep(0.5)

        # The steady state: from the moment every stream has relayed a token until the
        # first stream ends, no run starts or finishes: CPU per relayed token.
        steady: dict[str, Any] = {"waiting": len(stream_sockets)}

        def mark_steady(key: str) -> None:
            if key not in steady:
                steady[key] = (time.monotonic(), cpu_seconds(pids), sum(len(r.latencies_ms) for r in results))
                steady[f"{key}_wall"] = time.time()
                steady[f"{key}_machine"] = psutil.cpu_times()
                if key == "start" and profile is not None:
                    start_profiles(profile, "steady", {"daphne": pids["daphne"], "worker": worker_pid})
                if key == "start" and probe_sockets:
                    probing.append(asyncio.ensure_future(send_probes()))
                if key == "start":
                    holders.append(asyncio.ensure_future(asyncio.to_thread(runs_by_worker, stream_ids)))

        probing: list[asyncio.Future[None]] = []
        holders: list[asyncio.Future[dict[int, int]]] = []  # which worker holds each stream's run

        async def send_probes() -> None:
            # One message at a time while every stream streams (the steady state):
            # the queue wait of a message that arrives on a loaded system, apart from
            # the burst's. Their runs are short (the token server sees "probe").
            for session_id, ws in zip(probe_ids or [], probe_sockets, strict=True):
                await asyncio.sleep(PROBE_SPACING)
                if "end" in steady:
                    return
                probes_sent[session_id] = time.time()
                await ws.send_str(json.dumps({"type": "message", "text": "probe"}))

        async def consume(ws: Any, result: StreamResult, sent: float) -> None:
            first = True
            async for message in ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    break
                now_us = time.time_ns() // 1000
                data = message.data
                result.frames += 1
                # A text delta's frame is the worker's JSON text, type first: its stamps
                # are read from it as is (this client shares the cores it measures, so it
                # parses only the frames it must).
                kind = "chunk" if data.startswith(CHUNK_FRAME) else None
                frame: dict[str, Any] = {}
                if kind is None:
                    frame = json.loads(data)
                    kind = frame.get("type")
                if kind == "chunk":
                    if first:
                        first = False
                        result.first_chunk_ms = (time.monotonic() - sent) * 1000
                        result.first_chunk_wall = now_us / 1e6
                        steady["waiting"] -= 1
                        if steady["waiting"] == 0:
                            mark_steady("start")
                    stamps = TOKEN.findall(data)
                    for stamp in stamps:
                        result.latencies_ms.append((now_us - int(stamp)) / 1000)
                        result.received_at.append(now_us / 1e6)
                elif kind == "run.completed":
                    if "start" in steady:
                        mark_steady("end")
                    result.completed = True
                    return
                elif kind in ("run.failed", "error"):
                    result.failed = json.dumps(frame["payload"])[:200]
                    return
                elif kind == "resync":
                    result.resyncs += 1

        refused = await refused_round_trips(stream_sockets)
        watcher = asyncio.ensure_future(watch_worker())
        cpu_before, commits_before, started = cpu_seconds(pids), commits(), time.monotonic()
        sent_wall = time.time()
        if profile is not None:
            start_profiles(profile, "burst", {"daphne": pids["daphne"], "worker": worker_pid}, seconds=2)
        await asyncio.gather(
            *(ws.send_str(json.dumps({"type": "message", "text": "go"})) for ws in stream_sockets)
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(
                    *(consume(ws, r, started) for ws, r in zip(stream_sockets, results, strict=True))
                ),
                limit,
            )
        elapsed = time.monotonic() - started
        cpu_after, commits_after = cpu_seconds(pids), commits()
        watcher.cancel()
        for task in probing:
            task.cancel()
        still_open = sum(1 for ws in idle_sockets if not ws.closed)
        for ws in [*idle_sockets, *stream_sockets, *probe_sockets]:
            await ws.close()
    return {
        "results": results,
        "sent_wall": sent_wall,
        "idle_opened": len(idle_sockets),
        "idle_failed": idle_failures,
        "idle_still_open": still_open,
        "elapsed": elapsed,
        "cpu": {name: cpu_after[name] - cpu_before[name] for name in cpu_after},
        "steady": steady,
        "runs_by_pid": await holders[0] if holders else {},
        "pg_commits": commits_after - commits_before,
        "worker_idle_rss": worker_idle_rss,
        "worker_peak_rss": peak_worker_rss,
        "probes_sent": probes_sent,
        "refused": refused,
    }


async def refused_round_trips(sockets: list[Any]) -> list[float]:
    """Each socket sends, all at the same moment, a message the server refuses at once
    (no text): from sending to its error frame, in ms. That is the part of the burst's
    queue wait that is only the frames' way into Daphne's consumers and out again,
    with no database work."""
    import aiohttp

    started = time.monotonic()

    async def refused(ws: Any) -> float:
        while True:
            message = await ws.receive()
            if message.type != aiohttp.WSMsgType.TEXT:
                raise RuntimeError(f"socket closed before its error frame: {message.type}")
            if json.loads(message.data).get("type") == "error":
                return (time.monotonic() - started) * 1000

    replies = [asyncio.ensure_future(refused(ws)) for ws in sockets]
    await asyncio.gather(*(ws.send_str('{"type": "message", "text": ""}') for ws in sockets))
    return list(await asyncio.gather(*replies))


PROBE_SPACING = 0.15  # seconds between the messages sent one at a time


def py_spy() -> str | None:
    """py-spy's path (not a dependency: ``pip install py-spy``), or None."""
    beside = Path(sys.executable).with_name("py-spy")
    return shutil.which("py-spy") or (str(beside) if beside.exists() else None)


PROFILERS: list[subprocess.Popen[bytes]] = []  # waited for before the servers stop


def start_profiles(directory: Path, phase: str, pids: dict[str, int], seconds: int = 5) -> None:
    """``--profile``: sample each process with py-spy (folded stacks, a file per phase
    and process: ``burst-daphne.folded``...)."""
    spy = py_spy()
    assert spy is not None, "checked with the arguments"
    directory.mkdir(parents=True, exist_ok=True)
    for name, pid in pids.items():
        PROFILERS.append(
            subprocess.Popen(
                [
                    spy,
                    "record",
                    "-p",
                    str(pid),
                    "-d",
                    str(seconds),
                    "-r",
                    "400",
                    "-f",
                    "raw",
                    "--nonblocking",
                    "--gil",
                    "-o",
                    str(directory / f"{phase}-{name}.folded"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )


def run_times(session_ids: list[str]) -> dict[str, tuple[float | None, float | None]]:
    """Each stream's run: when it was created and started (wall clock), by session."""
    from agents.models import Run

    rows = (
        Run.objects.unscoped()
        .filter(session_id__in=session_ids)
        .values_list("session_id", "created_at", "started_at")
    )
    return {str(sid): (c.timestamp(), s.timestamp() if s else None) for sid, c, s in rows}


def runs_by_worker(session_ids: list[str]) -> dict[int, int]:
    """How many of the streams' runs each worker process holds now, by its pid (a
    running run's lease owner is ``host:pid:tag``)."""
    from django.db.models import Count

    from agents.models import Run

    rows = (
        Run.objects.unscoped()
        .filter(session_id__in=session_ids, status="running")
        .values_list("lease_owner")
        .annotate(n=Count("id"))
    )
    counts: dict[int, int] = {}
    for owner, n in rows:
        pid = int(owner.split(":")[-2]) if owner.count(":") >= 2 else 0
        counts[pid] = counts.get(pid, 0) + n
    return counts


def unfinished(session_ids: list[str]) -> list[str]:
    """What the database holds for streams that never saw their run end: each session's
    runs (status, events stored, error) or that it has none, for a look at a bad run."""
    from agents.models import Run

    found = {sid: [] for sid in session_ids}  # type: dict[str, list[str]]
    for sid, pk, status, seq, error in (
        Run.objects.unscoped()
        .filter(session_id__in=session_ids)
        .values_list("session_id", "pk", "status", "event_seq", "error")
    ):
        found[str(sid)].append(f"run {pk} {status}, {seq} events{', ' + error[:80] if error else ''}")
    return [f"{sid}: {'; '.join(runs) or 'no run'}" for sid, runs in found.items()]


def print_timeline(results: list[StreamResult]) -> None:
    """Relay latency second by second: the start (200 runs set up at once), the
    steady state and the end (runs finishing) apart."""
    points = sorted((t, v) for r in results for t, v in zip(r.received_at, r.latencies_ms, strict=True))
    if not points:
        return
    start = points[0][0]
    by_second: dict[int, list[float]] = {}
    for t, v in points:
        by_second.setdefault(int(t - start), []).append(v)
    print("relay latency by second  (tokens, p50, p99 in ms)")
    for second, values in sorted(by_second.items()):
        print(f"  {second:3d} s  {len(values):6d}  {pct(values, 50):8.1f}  {pct(values, 99):8.1f}")


# --------------------------------------------------------------------- main

SUMMARY = {
    "runs completed": re.compile(r"^runs completed\s+(\d+/\d+)", re.M),
    "tokens received": re.compile(r"^tokens received\s+(\d+/\d+)", re.M),
    "resync frames": re.compile(r"^resync frames\s+(\d+)", re.M),
    "relay p50 / p95 (all)": re.compile(r"^token relay latency\s+p50 (\S+) ms\s+p95 (\S+) ms", re.M),
    "relay p50 / p95 (steady)": re.compile(r"^  relay latency then\s+p50 (\S+) ms\s+p95 (\S+) ms", re.M),
    "worker CPU µs per token": re.compile(r"CPU µs per token: .*?worker (\d+)", re.M),
    "daphne CPU µs per token": re.compile(r"CPU µs per token: .*?daphne (\d+)", re.M),
}


def compare_layers(argv: list[str]) -> int:
    """``--compare``: this benchmark once per layer, as separate runs of this script
    with the same options (each its own database and processes), then the figures
    side by side."""
    forwarded: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--layer":
            skip = True
        elif arg != "--compare" and not arg.startswith("--layer="):
            forwarded.append(arg)
    outputs: dict[str, str] = {}
    for layer in ("postgres", "redis"):
        print(f"===== layer {layer}", flush=True)
        done = subprocess.run(
            [sys.executable, __file__, *forwarded, "--layer", layer], capture_output=True, text=True
        )
        print(done.stdout, end="")
        if done.returncode:
            print(done.stderr[-3000:])
            return done.returncode
        outputs[layer] = done.stdout
    print("===== side by side          postgres              redis")
    for label, pattern in SUMMARY.items():
        cells = []
        for layer in ("postgres", "redis"):
            found = pattern.search(outputs[layer])
            cells.append(" / ".join(found.groups()) if found else "-")
        print(f"{label:27s} {cells[0]:21s} {cells[1]}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.025)
    parser.add_argument("--layer", choices=["postgres", "redis"], default="postgres")
    parser.add_argument("--broker", choices=["orm", "redis"], default="orm")
    parser.add_argument("--q-workers", type=int, default=1)
    parser.add_argument(
        "--workers", type=int, default=1, help="claw_worker processes (each runs its own run loop)"
    )
    parser.add_argument(
        "--web", type=int, default=1, help="Daphne processes (the sockets are spread over them in turn)"
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="run the benchmark once per layer (postgres, then redis) with the other options, "
        "and print the two side by side",
    )
    parser.add_argument(
        "--socket-writes",
        type=int,
        default=2,
        help="CLAW_SOCKET_WRITES: messages the web process writes at once (the product's default, 2)",
    )
    parser.add_argument("--timeout", type=float, default=180)
    parser.add_argument(
        "--probes",
        type=int,
        default=20,
        help="messages sent one at a time while every stream runs (their queue wait is printed apart)",
    )
    parser.add_argument("--timeline", action="store_true", help="print relay latency second by second")
    parser.add_argument(
        "--profile",
        type=Path,
        help="write py-spy folded stacks of Daphne and the worker to this directory: the burst of runs "
        "starting (2 s from sending the messages) and the steady state (its first 5 s)",
    )
    parser.add_argument(
        "--harness-loop",
        choices=["uvloop", "asyncio"],
        default="uvloop",
        help="the event loop of this benchmark's own client and token server",
    )
    args = parser.parse_args()
    if args.profile and py_spy() is None:
        parser.error("--profile needs py-spy (pip install py-spy)")
    if args.compare:
        return compare_layers(sys.argv[1:])

    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # this script's few queries block on purpose
    tmp = Path(tempfile.mkdtemp(prefix="claw-bench-stream-"))
    db = setup_django(tmp)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        token_port, web_ports = free_port(), [free_port() for _ in range(args.web)]
        token_url, urls = f"http://127.0.0.1:{token_port}", [f"http://127.0.0.1:{p}" for p in web_ports]
        cookie, sessions = make_fixtures(token_url, args.streams + args.probes + 50)
        stream_ids = sessions[: args.streams]
        probe_ids = sessions[args.streams : args.streams + args.probes]
        idle_ids = sessions[args.streams + args.probes :]

        env = {
            "DATABASE_URL": os.environ["DATABASE_URL"],
            "CLAW_VAR_DIR": os.environ["CLAW_VAR_DIR"],
            "CHANNEL_LAYER_URL": "postgres" if args.layer == "postgres" else "redis://127.0.0.1:6379/14",
            "CLAW_Q_BROKER_URL": "orm" if args.broker == "orm" else "redis://127.0.0.1:6379/15",
            "CLAW_Q_WORKERS": str(args.q_workers),
            "CLAW_RUNS_PER_TENANT": str(args.streams * 2),
            "CLAW_RUNS_GLOBAL": str(args.streams * 2),
            "CLAW_RUNS_PER_WORKER": str(args.streams * 2),
            "LOG_LEVEL": "WARNING",
            "CLAW_SOCKET_WRITES": str(args.socket_writes),
        }
        if args.layer == "redis" or args.broker == "redis":
            import redis

            for number in (14, 15):
                redis.Redis(host="127.0.0.1", port=6379, db=number).flushdb()
        logs = tmp / "logs"
        logs.mkdir()
        processes += [
            start(
                [
                    sys.executable,
                    str(Path(__file__).with_name("token_server.py")),
                    "--port",
                    str(token_port),
                    "--tokens",
                    str(args.tokens),
                    "--interval",
                    str(args.interval),
                    "--loop",
                    args.harness_loop,
                ],
                env,
                logs / "tokens.log",
            ),
            start(
                web_server_command("127.0.0.1", web_ports[0]),
                env,
                logs / "web.log",
            ),
            *(
                start([sys.executable, "manage.py", "claw_worker"], env, logs / f"worker-{n}.log")
                for n in range(args.workers)
            ),
        ]
        _tokens_proc, web, worker = processes[:3]
        more_webs = [
            start(web_server_command("127.0.0.1", port), env, logs / f"web-{n + 2}.log")
            for n, port in enumerate(web_ports[1:])
        ]
        processes += more_webs
        wait_http(f"{token_url}/v1/models")
        for url in urls:
            wait_http(f"{url}/healthz")
        time.sleep(2)  # the worker cluster forks its processes
        web_idle_rss = tree_rss(web.pid)
        workers = processes[2 : 2 + args.workers]
        worker_pids = [{p.pid for p in process_tree(proc.pid)} for proc in workers]
        pids = {
            "worker": worker.pid,
            "daphne": web.pid,
            "token server": _tokens_proc.pid,
            "client": os.getpid(),
            **{f"worker {n + 2}": p.pid for n, p in enumerate(workers[1:])},
            **{f"daphne {n + 2}": p.pid for n, p in enumerate(more_webs)},
        }
        # This process made the fixtures (Django, 1,200 users): the client's own full
        # collections would walk all of that and stall every frame it times.
        freeze_startup_heap()
        if args.harness_loop == "uvloop":
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        out = asyncio.run(
            client(
                urls,
                cookie,
                stream_ids,
                idle_ids,
                args.idle,
                worker.pid,
                pids,
                args.timeout,
                args.profile,
                probe_ids,
            )
        )
        web_rss = tree_rss(web.pid)
        runs = run_times(stream_ids + probe_ids)
        per_worker = [sum(n for pid, n in out["runs_by_pid"].items() if pid in tree) for tree in worker_pids]
        stuck = unfinished(
            [
                sid
                for sid, r in zip(stream_ids, out["results"], strict=True)
                if not r.completed and not r.failed
            ]
        )
    finally:
        for profiler in PROFILERS:  # they end by themselves after their seconds
            with contextlib.suppress(subprocess.TimeoutExpired):
                profiler.wait(timeout=15)
        for process in processes:
            stop(process)
        if db is not None:
            db.stop()
        # The servers' logs stay (tmp/logs) for a look after a bad run; the data goes.
        for bulky in ("pgdata", "var"):
            shutil.rmtree(tmp / bulky, ignore_errors=True)

    results: list[StreamResult] = out["results"]
    latencies = [v for r in results for v in r.latencies_ms]
    completed = sum(r.completed for r in results)
    failures = [r.failed for r in results if r.failed]
    tokens_expected = args.streams * args.tokens
    print(
        f"configuration: layer={args.layer} broker={args.broker} q-workers={args.q_workers} workers={args.workers} "
        f"daphne={args.web} "
        f"harness-loop={args.harness_loop} socket-writes={args.socket_writes} "
        f"streams={args.streams} idle={args.idle} tokens/stream={args.tokens} every {args.interval * 1000:.0f} ms"
    )
    print(
        f"runs completed          {completed}/{args.streams} in {out['elapsed']:.1f} s"
        + (f"  (failures: {failures[:3]})" if failures else "")
    )
    for line in stuck[:5]:
        print(f"  never finished        {line}")
    print(f"tokens received         {len(latencies)}/{tokens_expected}")
    resyncs = sum(r.resyncs for r in results)
    print(f"resync frames           {resyncs}   (the server told a socket it had lost frames; 0 expected)")
    print(
        f"token relay latency     p50 {pct(latencies, 50):.1f} ms  p95 {pct(latencies, 95):.1f} ms  "
        f"p99 {pct(latencies, 99):.1f} ms  max {max(latencies, default=float('nan')):.1f} ms"
        "   (target p50 < 5, p99 < 50)"
    )
    first = [r.first_chunk_ms for r in results if r.first_chunk_ms is not None]
    print(
        f"first text              p50 {pct(first, 50):.0f} ms  p95 {pct(first, 95):.0f} ms  "
        f"max {max(first, default=float('nan')):.0f} ms   (from sending the message; the token "
        f"server writes its first token {args.interval * 1000:.0f} ms after the request)"
    )
    # Where the time to the first text goes: the message's transaction (the run's
    # creation), the queue (to a worker starting it), then the run's set-up and the
    # LLM's first token (25 ms) and its relay.
    queued: list[float] = []  # message sent -> run started: the queue wait
    to_created: list[float] = []  # message sent -> run created (the web process's transaction)
    waits: list[float] = []  # run created -> started (a worker claiming it)
    to_text: list[float] = []  # run started -> its first text at the client
    for session_id, result in zip(stream_ids, results, strict=True):
        created, run_started = runs.get(session_id, (None, None))
        if created is not None:
            to_created.append((created - out["sent_wall"]) * 1000)
        if run_started is not None:
            queued.append((run_started - out["sent_wall"]) * 1000)
        if created is not None and run_started is not None:
            waits.append((run_started - created) * 1000)
        if run_started is not None and result.first_chunk_wall is not None:
            to_text.append((result.first_chunk_wall - run_started) * 1000)
    print(
        f"queue wait              p50 {pct(queued, 50):.1f} ms  p95 {pct(queued, 95):.1f} ms  "
        f"max {max(queued, default=float('nan')):.1f} ms   (from sending the message to its run starting; "
        "target p50 < 20, p95 < 250)"
    )
    print(
        f"  of which              message -> run created p50 {pct(to_created, 50):.1f} ms  "
        f"p95 {pct(to_created, 95):.1f} ms;  run created -> started p50 {pct(waits, 50):.1f} ms  "
        f"p95 {pct(waits, 95):.1f} ms"
    )
    print(
        f"  then                  run started -> first text p50 {pct(to_text, 50):.0f} ms  p95 {pct(to_text, 95):.0f} ms"
    )
    refused = out["refused"]
    print(
        f"  floor                 p50 {pct(refused, 50):.1f} ms  p95 {pct(refused, 95):.1f} ms   (a message refused "
        f"at once, {len(refused)} sent together: the frames' way into Daphne and back, no database)"
    )
    probed = [
        (started - sent) * 1000
        for session_id, sent in out["probes_sent"].items()
        if (started := runs.get(session_id, (None, None))[1]) is not None
    ]
    if probed:
        print(
            f"  one at a time         p50 {pct(probed, 50):.1f} ms  p95 {pct(probed, 95):.1f} ms  "
            f"max {max(probed):.1f} ms   ({len(probed)} messages sent {PROBE_SPACING * 1000:.0f} ms apart "
            f"while all {args.streams} streams ran)"
        )
    print(
        f"sockets on {args.web} Daphne    {out['idle_opened']} idle opened ({out['idle_failed']} failed), "
        f"{out['idle_still_open']} still open at the end, + {args.streams} streaming   (target >= 1000 + 200)"
    )
    print(
        f"Daphne RSS              {web_idle_rss / MB:.0f} MB idle -> {web_rss / MB:.0f} MB with all sockets"
        + (" (the first Daphne's)" if args.web > 1 else "")
    )
    if args.workers > 1:
        print(f"streams per worker      {' / '.join(str(n) for n in per_worker)}")
    first_runs = per_worker[0] if args.workers > 1 else args.streams
    per_run = (out["worker_peak_rss"] - out["worker_idle_rss"]) / max(first_runs, 1)
    print(
        f"worker RSS              {out['worker_idle_rss'] / MB:.0f} MB idle -> {out['worker_peak_rss'] / MB:.0f} MB "
        f"peak: {per_run / 1024:.0f} KB per active run"
        + (f" (its {per_worker[0]} streams)" if args.workers > 1 else "")
    )
    print(f"PostgreSQL meanwhile    {out['pg_commits'] / out['elapsed']:.0f} commits/s")
    shares = ", ".join(f"{name} {used / out['elapsed'] * 100:.0f}%" for name, used in out["cpu"].items())
    steady = out["steady"]
    if "end" in steady:
        (t0, cpu0, n0), (t1, cpu1, n1) = steady["start"], steady["end"]
        per_token = ", ".join(
            f"{name} {(cpu1[name] - cpu0[name]) / max(n1 - n0, 1) * 1e6:.0f}" for name in cpu1
        )
        print(
            f"steady state            {n1 - n0} tokens in {t1 - t0:.1f} s ({(n1 - n0) / max(t1 - t0, 1e-9):.0f}/s); "
            f"CPU µs per token: {per_token}"
        )
        # The same latency, of the tokens received while every stream was streaming
        # (the figure above counts the burst of set-ups and the endings too).
        w0, w1 = steady["start_wall"], steady["end_wall"]
        during = [
            v for r in results for t, v in zip(r.received_at, r.latencies_ms, strict=True) if w0 <= t <= w1
        ]
        print(
            f"  relay latency then    p50 {pct(during, 50):.1f} ms  p95 {pct(during, 95):.1f} ms  "
            f"p99 {pct(during, 99):.1f} ms  ({len(during)} tokens, all {args.streams} streams running)"
        )
        print(f"  the machine then      {machine_busy(steady['start_machine'], steady['end_machine'])}")
    print(f"CPU while streaming     {shares} (of one core; the machine has {os.cpu_count()})")
    print(f"machine speed           {machine_speed()}")
    if args.timeline:
        print_timeline(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
