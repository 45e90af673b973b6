"""API keys kept in the web process between calls (A1): a call with a known key
reads no row to authenticate.

An entry is trusted only while the process's listener (:mod:`claw_platform.api.listener`)
is connected: triggers on the key, tenant, membership and user tables (migrations
``api/0003`` and ``api/0005``) NOTIFY ``claw_api_keys`` in the transaction of any
change (revocation, expiry, scopes, a deleted key, a deactivated tenant, the key's
creator removed, given another role or deactivated), whoever makes it (an action, the
admin, SQL), and the notification evicts the entry. So a revoked key stops working the moment its
revocation commits in this process (:func:`forget_key`) and within a
notification's delivery in the others. A lost connection empties the cache and turns
it off until LISTEN is back; an entry is also dropped after ``MAX_AGE_SECONDS``.

A read that raced a change is not kept: every change bumps a version, and an entry
is stored only if the version did not move while its row was read.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from django.db import transaction

if TYPE_CHECKING:
    from claw_platform.api.models import ApiKey

API_KEYS_CHANNEL = "claw_api_keys"
ALL_KEYS = "*"  # the payload of a change that may touch any key (a tenant's)
MAX_AGE_SECONDS = 60.0


class KeyCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[ApiKey, float]] = {}
        self._version = 0
        self._live = False

    def version(self) -> int | None:
        """Read before loading a key from the database; None when entries cannot be
        trusted (the listener is not connected)."""
        with self._lock:
            return self._version if self._live else None

    def get(self, prefix: str) -> ApiKey | None:
        with self._lock:
            if not self._live:
                return None
            entry = self._entries.get(prefix)
            if entry is None:
                return None
            if time.monotonic() - entry[1] > MAX_AGE_SECONDS:
                del self._entries[prefix]
                return None
            return entry[0]

    def put(self, prefix: str, api_key: ApiKey, version: int | None) -> None:
        """Keep ``api_key`` if nothing changed since ``version`` was read."""
        with self._lock:
            if self._live and version is not None and version == self._version:
                self._entries[prefix] = (api_key, time.monotonic())

    def forget(self, prefix: str) -> None:
        with self._lock:
            self._version += 1
            if prefix == ALL_KEYS:
                self._entries.clear()
            else:
                self._entries.pop(prefix, None)

    def _set_live(self, live: bool) -> None:
        with self._lock:
            self._version += 1
            self._entries.clear()
            self._live = live

    # ChannelHandler
    def connected(self) -> None:
        self._set_live(True)

    def disconnected(self) -> None:
        self._set_live(False)

    def notified(self, payload: str) -> None:
        # A key's own change names its prefix; a tenant's, a membership's or an
        # account's (``t:``, ``m:``, ``u:``) may change what any kept key says.
        self.forget(payload if is_key_prefix(payload) else ALL_KEYS)


def is_key_prefix(payload: str) -> bool:
    return ":" not in payload and payload != ALL_KEYS


key_cache = KeyCache()


def forget_key(prefix: str) -> None:
    """Evict ``prefix`` in this process now and again when the current transaction
    commits (a call in between may read the old row), not a notification's delivery
    later; the other processes hear the trigger's NOTIFY."""
    key_cache.forget(prefix)
    transaction.on_commit(lambda: key_cache.forget(prefix))


def connect_signals() -> None:
    """A key, tenant, membership or user saved or deleted through the ORM (the admin,
    an action) is evicted in this process at once; the triggers tell the other
    processes."""
    from django.contrib.auth import get_user_model
    from django.db.models.signals import post_delete, post_save

    from claw_platform.api.models import ApiKey
    from claw_platform.tenancy.models import Membership, Tenant

    def key_changed(sender: Any, instance: ApiKey, **kwargs: Any) -> None:
        if instance.prefix:
            forget_key(instance.prefix)

    def anything_changed(sender: Any, instance: Any, update_fields: Any = None, **kwargs: Any) -> None:
        if update_fields is not None and set(update_fields) <= {"last_login", "password"}:
            return  # a sign-in (or a new password) changes no key's rights
        forget_key(ALL_KEYS)

    for signal in (post_save, post_delete):
        signal.connect(key_changed, sender=ApiKey, weak=False, dispatch_uid="claw-key-cache-key")
        for model in (Tenant, Membership, get_user_model()):
            signal.connect(
                anything_changed, sender=model, weak=False, dispatch_uid=f"claw-key-cache-{model._meta.label}"
            )
