"""Obviously encoded text in a shell command, decoded for the approver (T12, issue 21).

``echo cm0gLXJmIC4= | base64 -d | sh`` shows an approver nothing they can read; the
approval request shows ``rm -rf .`` next to it. What counts as obviously encoded:

- base64 words, when the command decodes base64 (``base64 -d``/``--decode``,
  ``b64decode``, ``openssl base64 -d``);
- hex strings, when it decodes hex (``xxd -r``, ``fromhex``, ``unhexlify``);
- runs of ``\\xHH``, octal ``\\NNN`` or ``\\uHHHH`` escapes (``printf``,
  ``echo -e``, ``$'...'``, string literals of any language), always.

Decoded text is decoded again (base64 of base64 ...), a few levels deep. Nothing
here decides a risk: it is what a person reads before saying yes.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

SHOWN_CHARS = 4_096
MAX_DECODED = 6
SOURCE_CHARS = 512
MAX_DEPTH = 3

_BASE64_DECODE = re.compile(
    r"base64\s+(?:-[a-zA-Z]*d|--decode|-D)|b64decode|openssl\s+(?:enc\s+)?-?base64", re.I
)
_HEX_DECODE = re.compile(r"xxd\s+(?:-[a-z]+\s+)*-r|fromhex|unhexlify|hex2bin|pack\s*\(\s*['\"]H", re.I)
_BASE64_WORD = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{8,}={0,2}(?![A-Za-z0-9+/=_-])")
_HEX_WORD = re.compile(r"(?<![0-9A-Za-z])(?:[0-9a-fA-F]{2}){6,}(?![0-9A-Za-z])")
_ESCAPES = re.compile(r"(?:\\x[0-9a-fA-F]{2}|\\[0-7]{1,3}|\\u[0-9a-fA-F]{4}){2,}")
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})|\\([0-7]{1,3})|\\u([0-9a-fA-F]{4})")


@dataclass(frozen=True, slots=True)
class Decoded:
    encoding: str  # "base64", "hex" or "escapes"
    source: str  # the encoded text (its first SOURCE_CHARS: the whole is in the arguments)
    text: str  # what it decodes to (capped)
    truncated: bool = False

    def as_json(self) -> dict[str, object]:
        return {
            "encoding": self.encoding,
            "source": self.source,
            "text": self.text,
            "truncated": self.truncated,
        }


def decode_obvious(text: str) -> list[Decoded]:
    """Encoded pieces of ``text`` and what they say, outermost first."""
    found: list[Decoded] = []
    seen: set[str] = set()
    _decode_into(text, found, seen, depth=0, base64_seen=False, hex_seen=False)
    return found[:MAX_DECODED]


def _decode_into(
    text: str, found: list[Decoded], seen: set[str], *, depth: int, base64_seen: bool, hex_seen: bool
) -> None:
    if depth >= MAX_DEPTH or len(found) >= MAX_DECODED:
        return
    # A decoder named once applies to what it decodes too (base64 of base64).
    base64_seen = base64_seen or bool(_BASE64_DECODE.search(text))
    hex_seen = hex_seen or bool(_HEX_DECODE.search(text))
    candidates: list[tuple[str, str, bytes]] = []
    if base64_seen:
        for match in _BASE64_WORD.finditer(text):
            raw = _from_base64(match.group(0))
            if raw is not None:
                candidates.append(("base64", match.group(0), raw))
    if hex_seen:
        for match in _HEX_WORD.finditer(text):
            candidates.append(("hex", match.group(0), bytes.fromhex(match.group(0))))
    for match in _ESCAPES.finditer(text):
        candidates.append(("escapes", match.group(0), _unescape(match.group(0))))
    for encoding, source, raw in candidates:
        if source in seen or len(found) >= MAX_DECODED:
            continue
        seen.add(source)
        decoded = _readable(raw)
        if decoded is None:
            continue
        found.append(
            Decoded(
                encoding,
                source[:SOURCE_CHARS],
                decoded[:SHOWN_CHARS],
                truncated=len(decoded) > SHOWN_CHARS,
            )
        )
        _decode_into(decoded, found, seen, depth=depth + 1, base64_seen=base64_seen, hex_seen=hex_seen)


def _from_base64(word: str) -> bytes | None:
    padded = word + "=" * (-len(word) % 4)
    try:
        if "-" in word or "_" in word:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return None


def _unescape(text: str) -> bytes:
    out = bytearray()
    for match in _ESCAPE.finditer(text):
        hex_byte, octal, unicode = match.groups()
        if hex_byte is not None:
            out.append(int(hex_byte, 16))
        elif octal is not None:
            out.append(int(octal, 8) & 0xFF)
        else:
            out.extend(chr(int(unicode, 16)).encode("utf-8", "surrogatepass"))
    return bytes(out)


def _readable(raw: bytes) -> str | None:
    """``raw`` as text when it is mostly printable text (so words that merely look
    like base64 -- a path, a long name -- are not "decoded" into noise)."""
    if len(raw) < 2:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    printable = sum(1 for ch in text if ch.isprintable() or ch in "\n\r\t")
    if printable < 0.9 * len(text):
        return None
    return text.replace("\x00", "\\x00")
