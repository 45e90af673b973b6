"""Per-key rate limits in one statement (X4): the generic cell rate algorithm (GCRA)
over an UNLOGGED table, shared by every web process (migration ``api/0004``).

A rate of ``N`` per ``P`` seconds spaces calls ``P / N`` apart and lets a caller that
was quiet spend up to ``N`` of them at once; it keeps one number per key, the time
its next call would be due at the steady rate. A call is one upsert with the
database's clock (DRF's throttle over the cache spends a read and a write, and keeps
every call's timestamp). What the table holds may be lost in a database crash: a
caller's budget is then full again, nothing else.
"""

from __future__ import annotations

from django.db import connection

PRUNE_EVERY = 1000  # calls between deletions of the rows of idle keys

# ``EXCLUDED.tat`` is the call's own steady-rate due time: now + interval. The call is
# allowed when the key's due time is at most ``burst`` ahead of now; the retry time
# of a refused call is when that becomes true.
_TAKE_SQL = """
INSERT INTO claw_rate_limit AS r (key, tat, allowed)
VALUES (%(key)s, extract(epoch FROM clock_timestamp()) + %(interval)s, true)
ON CONFLICT (key) DO UPDATE SET
    allowed = r.tat <= EXCLUDED.tat + %(slack)s,
    tat = CASE WHEN r.tat <= EXCLUDED.tat + %(slack)s
        THEN greatest(r.tat + %(interval)s, EXCLUDED.tat) ELSE r.tat END
RETURNING allowed, tat - extract(epoch FROM clock_timestamp()) - %(burst)s
"""

_calls = 0


def take(key: str, requests: int, period: float) -> float | None:
    """Spend one call of ``key``'s budget (``requests`` per ``period`` seconds): None
    when allowed, else the seconds until the next call would be."""
    global _calls
    interval = period / requests
    with connection.cursor() as cursor:
        burst = period - interval
        cursor.execute(
            _TAKE_SQL, {"key": key[:200], "interval": interval, "burst": burst, "slack": burst - interval}
        )
        allowed, due_in = cursor.fetchone()
        _calls += 1
        if _calls % PRUNE_EVERY == 0:
            # A key due in the past has its whole budget: its row says nothing.
            cursor.execute("DELETE FROM claw_rate_limit WHERE tat < extract(epoch FROM clock_timestamp())")
    return None if allowed else max(float(due_in), 0.001)
