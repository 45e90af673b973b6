"""Making and checking API keys and pairing codes. Only hashes are stored."""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "claw_"
_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud and typed


def sha256_hex(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def new_api_key() -> tuple[str, str]:
    """``(prefix, key)``: the key is ``claw_<prefix>_<secret>`` with 192 random bits."""
    prefix = secrets.token_hex(6)
    return prefix, f"{KEY_PREFIX}{prefix}_{secrets.token_urlsafe(24)}"


def key_prefix(key: str) -> str | None:
    """The lookup prefix of a well-formed key, else None."""
    if not key.startswith(KEY_PREFIX):
        return None
    prefix, sep, secret = key[len(KEY_PREFIX) :].partition("_")
    if not sep or len(prefix) != 12 or not secret:
        return None
    return prefix


def key_matches(key: str, stored_hash: str) -> bool:
    return hmac.compare_digest(sha256_hex(key), stored_hash)


def new_pairing_code() -> str:
    """Ten characters in two groups (50 bits), e.g. ``K7PQ2-XMR9A``."""
    raw = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(10))
    return f"{raw[:5]}-{raw[5:]}"


def normalise_pairing_code(code: str) -> str:
    return "".join(ch for ch in code.upper() if ch.isalnum())
