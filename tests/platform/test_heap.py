"""The start-up heap of a serving process is frozen (claw_platform.heap)."""

from __future__ import annotations

import gc
import subprocess
import sys


def test_freezing_the_start_up_heap_hides_it_from_the_collector() -> None:
    # In a process of its own: freezing this one would hide the test session's heap.
    code = (
        "import gc, django.conf\n"
        "from claw_platform.heap import freeze_startup_heap\n"
        "before = gc.get_freeze_count()\n"
        "freeze_startup_heap()\n"
        "print(before, gc.get_freeze_count(), gc.collect())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    before, frozen, _collected = (int(n) for n in out.split())
    assert before == 0
    assert frozen > 1000  # Django's modules among them
    assert gc.get_freeze_count() == 0  # this process untouched
