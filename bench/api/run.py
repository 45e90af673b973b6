#!/usr/bin/env python
"""What the API adds on top of a run, and /v1/chat/completions under load.

    .venv/bin/python bench/api/run.py [--runs 40] [--clients 50] [--requests 300]
                                      [--litellm /path/to/venv/bin/litellm]

Starts the real topology on this machine: an embedded PostgreSQL, Daphne serving the
ASGI application, one ``claw_worker`` (django-q2 cluster + the run loop), the fake LLM
(OpenAI wire, answering at once) and the PostgreSQL channel layer. Then:

1. ``wait`` mode overhead: ``POST /api/v1/sessions/<id>/messages/`` with
   ``mode=wait``, alternating with the same message sent through the product's own
   action in this process (``do_send_message``, then the NOTIFY that settles the
   run). The API's overhead is the difference of the medians (target: p50 < 10 ms).
   Also printed: each call's wall time minus its Run row's lifetime (``created_at``
   to ``finished_at``), which counts the API's share of the run's own transaction.
2. ``/v1/chat/completions`` throughput with ``--clients`` concurrent clients.
3. The same load through a LiteLLM proxy to the same fake LLM, if its CLI is found
   (``--litellm``, beside this Python or on PATH; a virtualenv of its own is fine);
   otherwise the reason it was skipped is printed.

Row-level security (issue 22): 1 and 2 run in ``--rls-rounds`` rounds, each round once
with the tables' forced policies (as the product runs) and once with row-level
security disabled on every tenant table (``bench/rls/toggle.py``), in alternating
order so both see the same machine load; the figures above are the RLS-on ones, and
the cost is printed as the ratio on / off of the medians (target < 1.05). The
tenancy context's mirror (``set_config`` when the tenant changes) runs in both arms:
``bench/rls/run.py`` prints its share.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from claw_platform.cli.up import web_server_command  # noqa: E402


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def wait_http(url: str, timeout: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer in {timeout} s")


def setup_tenant(fake_url: str) -> str:
    from agents.actions.config import do_create_agent, do_create_model_profile, do_create_provider
    from claw_platform.api.actions.keys import do_create_api_key
    from claw_platform.tenancy.actions import do_create_tenant

    tenant = do_create_tenant("Bench", slug="bench")
    provider = do_create_provider(
        tenant, name="fake", kind="openai_compatible", base_url=fake_url, api_key="k"
    )
    model = do_create_model_profile(
        provider, model="fake-model", context_window=32_000, max_output_tokens=1024
    )
    do_create_agent(tenant, slug="assistant", name="Assistant", model=model, files={"SOUL.md": "Be brief."})
    _key, plaintext = do_create_api_key(tenant, name="bench", scopes=["write"], acting_user="bench")
    return plaintext


@dataclass
class WaitFigures:
    api: list[float]  # wall time of each wait-mode call, ms
    direct: list[float]  # the same message sent in-process, until its settle NOTIFY, ms
    beyond_row: list[float]  # each call's wall time minus its Run row's lifetime, ms

    @property
    def overhead(self) -> float:
        return statistics.median(self.api) - statistics.median(self.direct)


def measure_wait_overhead(base: str, key: str, runs: int) -> WaitFigures:
    """Alternate the two ways of sending one message and waiting for the reply: a
    ``wait``-mode API call, and the product's own action (``do_send_message``, what
    the chat socket calls) followed by the NOTIFY of the transaction that settles
    the run. Both go through the same worker and fake LLM, so the difference of
    their medians is what the API adds: HTTP, authentication, the rate limit, the
    session lookup, the wait and the response."""
    import httpx
    import psycopg

    from agents.actions.runs import RUN_SETTLED_CHANNEL, do_send_message
    from agents.models import Run, RunStatus, Session
    from claw_platform.db import listen_connection_params

    headers = {"Authorization": f"Bearer {key}"}
    figures = WaitFigures([], [], [])
    with (
        httpx.Client(base_url=base, headers=headers, timeout=60) as client,
        psycopg.connect(**listen_connection_params(), autocommit=True) as listener,
    ):
        listener.execute(f"LISTEN {RUN_SETTLED_CHANNEL}")
        api_session = client.post("/api/v1/sessions/", json={"agent": "assistant", "title": "api"}).json()
        direct_session_id = client.post(
            "/api/v1/sessions/", json={"agent": "assistant", "title": "direct"}
        ).json()["id"]
        direct_session = Session.objects.unscoped().get(pk=direct_session_id)
        for i in range(runs + 3):
            began = time.perf_counter()
            response = client.post(
                f"/api/v1/sessions/{api_session['id']}/messages/", json={"text": f"hi {i}", "mode": "wait"}
            )
            api_wall = time.perf_counter() - began
            body = response.json()
            assert body.get("status") == "completed", body
            run = Run.objects.unscoped().get(pk=body["id"])
            assert run.finished_at is not None
            own = (run.finished_at - run.created_at).total_seconds()
            list(listener.notifies(timeout=0))  # the API run's own notification

            began = time.perf_counter()
            direct_run = do_send_message(direct_session, f"hi {i}", acting_user=None)
            assert direct_run is not None
            settled = False
            while not settled:
                for note in listener.notifies(timeout=30, stop_after=1):
                    settled = note.payload.partition(":")[0] == str(direct_run.pk)
                if time.perf_counter() - began > 30:
                    raise SystemExit("an in-process run did not settle in 30 s")
            direct_wall = time.perf_counter() - began
            assert Run.objects.unscoped().get(pk=direct_run.pk).status == RunStatus.COMPLETED
            if i >= 3:  # warm-up: first connections, caches
                figures.api.append(api_wall * 1000)
                figures.direct.append(direct_wall * 1000)
                figures.beyond_row.append((api_wall - own) * 1000)
    return figures


async def load(url: str, key: str, model: str, clients: int, requests: int) -> tuple[float, list[float], int]:
    import httpx

    latencies: list[float] = []
    errors = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=120, limits=limits
    ) as client:

        async def worker() -> None:
            nonlocal errors
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                began = time.perf_counter()
                response = await client.post(
                    url, json={"model": model, "messages": [{"role": "user", "content": f"hello {i}"}]}
                )
                if response.status_code == 200 and response.json()["choices"][0]["message"]["content"]:
                    latencies.append((time.perf_counter() - began) * 1000)
                else:
                    errors += 1

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - began
    return elapsed, latencies, errors


def report_load(label: str, elapsed: float, latencies: list[float], errors: int) -> None:
    done = len(latencies)
    print(
        f"{label}: {done / elapsed:7.1f} req/s  ({done} ok, {errors} failed in {elapsed:.1f} s; "
        f"latency p50 {percentile(latencies, 0.5):.0f} ms, p95 {percentile(latencies, 0.95):.0f} ms)"
        if latencies
        else f"{label}: no successful request ({errors} failed)"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--litellm", help="the litellm proxy CLI, for the comparison")
    parser.add_argument("--rls-rounds", type=int, default=3, help="rounds of RLS on / off (0: on only)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="claw-bench-api-"))
    from claw_platform.embedded_db import start_embedded_database

    database = start_embedded_database(work / "pgdata")
    procs: list[subprocess.Popen[bytes]] = []
    from tests.fakes.fake_llm import FakeLLM, Turn

    fake = FakeLLM(default_reply=Turn(text="Benchmark reply.")).start()
    try:
        env = {
            **os.environ,
            "DATABASE_URL": database.url,
            "DATABASE_OWNER_URL": database.owner_url,
            "CLAW_VAR_DIR": str(work / "var"),
            "DJANGO_SETTINGS_MODULE": "claw_platform.settings",
            "CHANNEL_LAYER_URL": "postgres",
            "CLAW_RUNS_PER_TENANT": "200",
            "CLAW_RUNS_PER_WORKER": "200",
            "CLAW_API_RATE": "1000000/min",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
        }
        os.environ.update(
            {
                k: env[k]
                for k in (
                    "DATABASE_URL",
                    "DATABASE_OWNER_URL",
                    "CLAW_VAR_DIR",
                    "DJANGO_SETTINGS_MODULE",
                    "CHANNEL_LAYER_URL",
                )
            }
        )
        import django

        django.setup()
        from claw_platform.tenancy.context import set_scope

        # The bench's own driver sets up and inspects rows as system code (the servers
        # it starts are processes of their own, bound by the policies).
        set_scope(None, all_tenants=True)
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
        key = setup_tenant(fake.openai_base_url)
        port = free_port()
        log = (work / "servers.log").open("ab")
        procs.append(
            subprocess.Popen(
                web_server_command("127.0.0.1", port),
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "claw_worker"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        )
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/healthz")
        print(f"API on {base}, worker and fake LLM up; PostgreSQL channel layer; {os.cpu_count()} CPUs")

        if args.rls_rounds > 0:
            compare_rls(base, key, args, database.owner_url)
            return 0
        wait = measure_wait_overhead(base, key, args.runs)
        print(f"wait mode, {len(wait.api)} calls alternating with the same message sent in-process:")
        print(
            f"  API call:           p50 {statistics.median(wait.api):6.1f} ms, "
            f"p95 {percentile(wait.api, 0.95):6.1f} ms"
        )
        print(
            f"  in-process run:     p50 {statistics.median(wait.direct):6.1f} ms, "
            f"p95 {percentile(wait.direct, 0.95):6.1f} ms  (do_send_message to its settle NOTIFY)"
        )
        print(f"  overhead of the API: {wait.overhead:5.1f} ms at p50  (target < 10 ms)")
        print(
            f"  call minus its Run row's lifetime (created_at to finished_at): "
            f"p50 {statistics.median(wait.beyond_row):.1f} ms, p95 {percentile(wait.beyond_row, 0.95):.1f} ms"
        )
        elapsed, latencies, errors = asyncio.run(
            load(f"{base}/v1/chat/completions", key, "assistant", args.clients, args.requests)
        )
        report_load(f"/v1/chat/completions, {args.clients} clients", elapsed, latencies, errors)
        run_litellm(fake.openai_base_url, args)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
        fake.stop()
        database.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def compare_rls(base: str, key: str, args: argparse.Namespace, owner_url: str) -> None:
    """1 and 2 with row-level security on and off, alternating, ``--rls-rounds`` times."""
    from bench.rls.toggle import set_row_level_security

    rounds = args.rls_rounds
    per_round = max(10, args.runs // rounds)
    requests = max(args.clients, args.requests // rounds)
    waits: dict[bool, WaitFigures] = {True: WaitFigures([], [], []), False: WaitFigures([], [], [])}
    loads: dict[bool, list[tuple[float, list[float], int]]] = {True: [], False: []}
    for number in range(rounds):
        for enabled in (True, False) if number % 2 == 0 else (False, True):
            set_row_level_security(owner_url, enabled)
            figures = measure_wait_overhead(base, key, per_round)
            for name in ("api", "direct", "beyond_row"):
                getattr(waits[enabled], name).extend(getattr(figures, name))
            loads[enabled].append(
                asyncio.run(load(f"{base}/v1/chat/completions", key, "assistant", args.clients, requests))
            )
    set_row_level_security(owner_url, True)
    on, off = waits[True], waits[False]
    print(f"wait mode, RLS on (forced policies), {len(on.api)} calls in {rounds} rounds:")
    print(
        f"  API call:           p50 {statistics.median(on.api):6.1f} ms, p95 {percentile(on.api, 0.95):6.1f} ms"
    )
    print(
        f"  in-process run:     p50 {statistics.median(on.direct):6.1f} ms, "
        f"p95 {percentile(on.direct, 0.95):6.1f} ms  (do_send_message to its settle NOTIFY)"
    )
    print(f"  overhead of the API: {on.overhead:5.1f} ms at p50  (target < 10 ms)")
    for label, name in (("API wait-mode call", "api"), ("in-process run", "direct")):
        a, b = statistics.median(getattr(on, name)), statistics.median(getattr(off, name))
        print(f"RLS cost, {label}: p50 on {a:.1f} ms / off {b:.1f} ms = ratio {a / b:.3f}  (target < 1.05)")
    rates: dict[bool, float] = {}
    for enabled in (True, False):
        elapsed = sum(e for e, _, _ in loads[enabled])
        latencies = [x for _, lat, _ in loads[enabled] for x in lat]
        errors = sum(err for _, _, err in loads[enabled])
        report_load(
            f"/v1/chat/completions, {args.clients} clients, RLS {'on' if enabled else 'off'}",
            elapsed,
            latencies,
            errors,
        )
        rates[enabled] = len(latencies) / elapsed
    print(
        f"RLS cost, /v1/chat/completions throughput: off {rates[False]:.1f} / on {rates[True]:.1f} req/s "
        f"= ratio {rates[False] / rates[True]:.3f}  (target < 1.05)"
    )


LITELLM_KEY = "sk-claw-bench-0123456789abcdef0123456789abcdef"  # the proxy refuses to start without one


def litellm_command(given: str | None) -> str | None:
    """The ``litellm`` proxy CLI: ``--litellm PATH``, next to this Python, or on PATH.
    It may live in a virtualenv of its own (its pins clash with the product's)."""
    if given:
        return given
    beside = Path(sys.executable).with_name("litellm")
    return str(beside) if beside.exists() else shutil.which("litellm")


def run_litellm(fake_url: str, args: argparse.Namespace) -> None:
    command = litellm_command(args.litellm)
    if command is None:
        print(
            "LiteLLM proxy: skipped (no `litellm` CLI; `pip install 'litellm[proxy]'` into any "
            "virtualenv and pass --litellm /path/to/bin/litellm)"
        )
        return
    port = free_port()
    config = Path(tempfile.mkdtemp()) / "litellm.yaml"
    config.write_text(
        "model_list:\n  - model_name: fake\n    litellm_params:\n"
        f"      model: openai/fake-model\n      api_base: {fake_url}\n      api_key: k\n"
    )
    proc = subprocess.Popen(
        [
            command,
            "--config",
            str(config),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
        ],
        # Its own environment: given DATABASE_URL, the proxy would try to use our database.
        env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp")}
        | {"LITELLM_LOG": "ERROR", "LITELLM_MASTER_KEY": LITELLM_KEY},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/health/liveliness", timeout=120)
        elapsed, latencies, errors = asyncio.run(
            load(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                LITELLM_KEY,
                "fake",
                args.clients,
                args.requests,
            )
        )
        report_load(f"LiteLLM proxy, {args.clients} clients", elapsed, latencies, errors)
    except SystemExit as exc:
        print(f"LiteLLM proxy: skipped ({exc})")
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=15)


if __name__ == "__main__":
    sys.exit(main())
