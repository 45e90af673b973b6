"""Sign-in throttling (issue 21, defect 4), on django-axes.

Failed sign-ins are counted per (account, address) and per address, in django-axes'
``AccessAttempt`` rows. An account is locked out from one address after
``CLAW_SIGNIN_MAX_FAILURES`` failures there, so nobody elsewhere can lock its owner out
by guessing at the name; an address is locked out for every account after the looser
``CLAW_SIGNIN_MAX_FAILURES_PER_ADDRESS``. A lock-out lasts ``CLAW_SIGNIN_LOCKOUT_SECONDS``
from the failure that completed it (failures while locked out neither count nor extend
it); a sign-in that succeeds clears its own (account, address) count. The address is
``claw_platform.client_address`` (trusted proxies). Both sign-in pages (admin and chat)
say when to try again (429 with Retry-After); every lock-out and unlock is an audit
event; a superuser lifts one in the admin (Access attempts) or with
``claw unlock <username|address>``.
"""
