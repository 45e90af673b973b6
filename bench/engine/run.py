"""Every engine figure of the engine issue, one script after the other.

    .venv/bin/python bench/engine/run.py

- loop overhead per iteration, in-memory fakes        (target p50 < 0.3 ms)
- loop overhead per iteration, PostgreSQL store        (target p50 < 5 ms, p95 < 15 ms)
- message to first LLM request byte, 10 / 10,000 msgs  (target p95 < 25 ms)
- provider streaming throughput, 500 concurrent        (target >= 400 calls/s; see the note there)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    ["loop_overhead.py", "--iterations", "2000"],
    ["store_overhead.py"],
    ["provider_stream.py"],
]


def main() -> int:
    status = 0
    for script, *args in SCRIPTS:
        print(f"== {script}", flush=True)
        status |= subprocess.call([sys.executable, str(HERE / script), *args])
    return status


if __name__ == "__main__":
    sys.exit(main())
