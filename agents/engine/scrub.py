"""Credential scrubbing for tool output and logs (E14).

ZeroClaw replaces ``token=``, ``api_key=`` ... values with ``[REDACTED]`` before a
tool result goes back into history; IronClaw's leak detector adds vendor key
shapes, private keys and connection strings. Both lists are here, precompiled.

Speed matters (tool output can be megabytes): the vendor shapes are one combined
pattern (one scan), each other pattern is skipped when a substring check shows it
cannot match, and ``key=value`` pairs are found by scanning a lower-cased copy for
the keywords and checking each hit locally, instead of a case-insensitive regex
that would try every word start.
"""

from __future__ import annotations

import re
from collections.abc import Callable

REDACTED = "[REDACTED]"

# Vendor token shapes (IronClaw leak detector + ZeroClaw). One alternation, one scan.
_TOKEN_SHAPES = (
    r"sk-ant-[A-Za-z0-9_-]{20,}",  # Anthropic
    r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",  # OpenAI
    r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe secret / restricted
    r"(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b",  # AWS access key id
    r"gh[pousr]_[A-Za-z0-9]{30,}",  # GitHub
    r"github_pat_[A-Za-z0-9_]{30,}",  # GitHub fine-grained
    r"glpat-[A-Za-z0-9_-]{20,}",  # GitLab
    r"xox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
    r"AIza[0-9A-Za-z_-]{35}",  # Google
    r"hf_[A-Za-z0-9]{30,}",  # Hugging Face
    r"npm_[A-Za-z0-9]{36}",  # npm
    r"SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}",  # SendGrid
    r"\d{8,10}:AA[A-Za-z0-9_-]{33}\b",  # Telegram bot
    r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWT
)
_TOKEN_RE = re.compile(r"\b(?:" + "|".join(_TOKEN_SHAPES) + ")")

_PRIVATE_KEY_RE = re.compile(
    r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
    # Up to the END line, or (output cut short) the rest of the base64 body.
    r"(?:.*?-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s:,-]*)",
    re.S,
)
_SLACK_WEBHOOK_RE = re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+")
_BEARER_RE = re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}")
_BASIC_RE = re.compile(r"(?i)(\bauthorization\s*[:=]\s*[\"']?basic\s+)[A-Za-z0-9+/=]{8,}")
# scheme://user:password@host -- only the password goes.
_URL_PASSWORD_RE = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s:/@]{0,256}:)([^\s@/]{1,256})(@)")

# key = value. Found on the lower-cased text by keyword; the identifier it sits in
# must then *be* a secret-ish name (``db_password``, ``x-api-key``), not merely
# contain one (``monkey``).
_KEYWORD_HIT_RE = re.compile(r"(?:key|token|secret|passw|pwd|credential)[a-z0-9_.-]{0,30}[\"']?[ \t]*[:=]")
_SECRET_NAME_RE = re.compile(
    r"(?:[a-z0-9]{1,24}[_.-]){0,5}"
    r"(?:api[_-]?key|apikey|access[_-]?key|secret(?:[_-]?key)?|client[_-]?secret|"
    r"[a-z]{0,12}token|passw(?:or)?d|passwd|pwd|credentials?|private[_-]?key|"
    r"session[_-]?key|signing[_-]?key|encryption[_-]?key|master[_-]?key)"
    r"(?:[_-][a-z0-9]{1,24}){0,3}"
)
_SEPARATOR_VALUE_RE = re.compile(
    r"([\"']?[ \t]*[:=][ \t]*)(\"[^\"\n]{4,}\"|'[^'\n]{4,}'|[^\s\"',;&<>{}\[\]]{6,})"
)
_NOT_SECRET_NAMES = frozenset({"pwd", "oldpwd"})  # the shell's working directories
_IDENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.-")
_IDENT_MAX = 64


def _keep_group_1(match: re.Match[str]) -> str:
    return match.group(1) + REDACTED


def _keep_groups_1_3(match: re.Match[str]) -> str:
    return match.group(1) + REDACTED + match.group(3)


_SIMPLE_RULES: tuple[tuple[re.Pattern[str], tuple[str, ...], str | Callable[..., str]], ...] = (
    (_PRIVATE_KEY_RE, ("private key",), REDACTED),
    (_SLACK_WEBHOOK_RE, ("hooks.slack.com",), REDACTED),
    (_TOKEN_RE, ("sk-", "_live_", "_test_", "akia", "asia", "agpa", "aida", "aroa", "gh",
                 "glpat-", "xox", "aiza", "hf_", "npm_", "sg.", ":aa", "eyj"), REDACTED),
    (_BEARER_RE, ("bearer",), _keep_group_1),
    (_BASIC_RE, ("basic",), _keep_group_1),
    (_URL_PASSWORD_RE, ("://",), _keep_groups_1_3),
)  # fmt: skip


def _scrub_key_values(text: str) -> str:
    lowered = text.lower()
    if len(lowered) != len(text):
        # A few Unicode characters change length when lower-cased; positions would
        # no longer line up, so work on an ASCII-only lowering instead.
        lowered = "".join(c.lower() if c.isascii() else "?" for c in text)
    out: list[str] = []
    pos = 0  # everything before ``pos`` has been copied to ``out``
    for hit in _KEYWORD_HIT_RE.finditer(lowered):
        start = hit.start()
        if start < pos:
            continue
        # Walk back to the start of the identifier holding the keyword.
        limit = max(pos, start - _IDENT_MAX)
        while start > limit and lowered[start - 1] in _IDENT_CHARS:
            start -= 1
        name = _SECRET_NAME_RE.match(lowered, start)
        if name is None or name.end() < hit.start() + 3:
            continue
        if lowered[start : name.end()] in _NOT_SECRET_NAMES:
            continue
        value = _SEPARATOR_VALUE_RE.match(text, name.end())
        if value is None:
            continue
        raw = value.group(2)
        if raw.strip("\"'") == REDACTED:
            continue
        quote = raw[0] if raw[0] in "\"'" else ""
        out.append(text[pos : value.start(2)])
        out.append(f"{quote}{REDACTED}{quote}")
        pos = value.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def scrub_credentials(text: str) -> str:
    """Replace credentials in ``text`` with ``[REDACTED]`` (E14).

    Covers API keys of the common vendors (OpenAI, Anthropic, AWS, GitHub, GitLab,
    Slack, Google, Stripe, Hugging Face, npm, SendGrid, Telegram), PEM private keys,
    JWTs, ``Bearer``/``Basic`` authorization values, passwords in connection URLs,
    and ``key=value`` / ``"key": "value"`` pairs whose key names a secret
    (``api_key``, ``token``, ``password``, ``DB_PASSWORD``, ``x-api-key`` ...). Keys
    and the surrounding syntax stay so the output still reads correctly.
    """
    if not text:
        return text
    lowered = text.lower()
    for pattern, hints, replacement in _SIMPLE_RULES:
        if any(hint in lowered for hint in hints):
            text = pattern.sub(replacement, text)
    if any(k in lowered for k in ("key", "token", "secret", "passw", "pwd", "credential")):
        text = _scrub_key_values(text)
    return text
