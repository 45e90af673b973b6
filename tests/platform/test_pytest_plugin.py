"""The test plugin's embedded PostgreSQL never outlives its pytest run, also when the
run ends before it starts (a usage error: the server starts when the plugin is
imported, before pytest reads its command line)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary folder with a short path: the embedded server's socket path must fit
    the 107 bytes a Unix socket allows (pytest's own under xdist is too long)."""
    folder = Path(tempfile.mkdtemp(prefix="cp-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_run_that_ends_at_its_command_line_leaves_no_server(short_tmp: Path) -> None:
    tmp_path = short_tmp
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CLAW_VAR_DIR")}
    env["TMPDIR"] = str(tmp_path)  # where the plugin makes its run directory
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--no-such-option"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 4, done.stderr  # pytest's usage error
    assert "--no-such-option" in done.stderr
    left = [
        p
        for p in psutil.process_iter(["pid", "cmdline"])
        if any(str(tmp_path) in part for part in (p.info["cmdline"] or []))
    ]
    for process in left:  # a failure here must not leave one behind either
        process.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
    assert [p.info["pid"] for p in left] == []
    assert list(tmp_path.glob("claw-tests-*")) == []
