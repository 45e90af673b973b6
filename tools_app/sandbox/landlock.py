"""Landlock (Linux 5.13+) for host-run commands: a process confines itself, no
privileges needed. Applied in the child between fork and exec.

Rules: the workspace is read/write; system directories (``/usr``, ``/bin``, ``/lib``
...) and a few files of ``/etc`` are read/execute; everything else -- the product's
source, its ``var`` directory with keys and the database, other workspaces, ``/proc``
with the parent's environment -- is out of reach. From ABI 4 TCP bind/connect are
refused unless the network is allowed; from ABI 6 signals and abstract sockets are
scoped to the sandbox.
"""

from __future__ import annotations

import ctypes
import functools
import os
import struct
from collections.abc import Callable, Sequence

_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ_EXECUTE = EXECUTE | READ_FILE | READ_DIR

_libc = ctypes.CDLL(None, use_errno=True)


@functools.cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is unavailable."""
    try:
        version = _libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    except (AttributeError, OSError):
        return 0
    return max(0, int(version))


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def confinement(
    *, writable: Sequence[str], readable: Sequence[str], allow_network: bool
) -> Callable[[], None] | None:
    """A ``preexec_fn`` that confines the child, or ``None`` without Landlock.

    The rule structures are packed here, in the parent; the child only opens the
    paths and makes the syscalls.
    """
    abi = landlock_abi()
    if abi < 1:
        return None
    handled_fs = _fs_rights(abi)
    handled_net = (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 and not allow_network else 0
    scoped = (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0
    if abi >= 6:
        attr = struct.pack("QQQ", handled_fs, handled_net, scoped)
    elif abi >= 4:
        attr = struct.pack("QQ", handled_fs, handled_net)
    else:
        attr = struct.pack("Q", handled_fs)
    rules: list[tuple[str, int]] = [(p, handled_fs) for p in writable]
    rules += [(p, READ_EXECUTE) for p in readable]
    attr_buffer = ctypes.create_string_buffer(attr, len(attr))

    def apply() -> None:
        ruleset = _libc.syscall(_SYS_CREATE_RULESET, attr_buffer, ctypes.c_size_t(len(attr)), 0)
        if ruleset < 0:
            raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a system path this host does not have
            try:
                if not os.path.isdir(path):
                    rights &= FILE_ONLY
                rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
                if _libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, rule, 0) < 0:
                    raise OSError(ctypes.get_errno(), "landlock_add_rule failed")
            finally:
                os.close(fd)
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
        if _libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) < 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
        os.close(ruleset)

    return apply
