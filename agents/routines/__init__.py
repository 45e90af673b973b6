"""Routines that run (C1-C8): the scheduler inside the workers and what a fire does.

- :mod:`.times` -- due times: cron in the routine's IANA zone (DST-safe), intervals,
  one-shots, the deterministic jitter and the catch-up stagger.
- :mod:`.planner` -- due routines become :class:`~agents.models.RoutineFire` rows
  (missed-run policy, catch-up window, replay cap) and their next time.
- :mod:`.firing` -- a worker claims due fires (``FOR UPDATE SKIP LOCKED``) and starts
  each once: overlap, hourly cap, the action (agent run, light run, shell).
- :mod:`.outcome` -- finished runs settle their RoutineRun: output, cost, retries
  with backoff, auto-pause, one-shot completion, timeouts, history trim.
- :mod:`.shell` -- shell routines behind the gates (C3).
- :mod:`.scheduler` -- the thread in each ``claw_worker`` that ties it together.
"""
