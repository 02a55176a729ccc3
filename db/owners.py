"""Who runs a job: a driver's owner id, and whether the process behind one is still alive.

An owner id is HOST:PID:RANDOM. A driver holds the jobs it claimed under a lease it renews; a
lease that ran out, or one whose process on this host is gone, can be taken over by another
driver (db/store.py `claim`).
"""

from __future__ import annotations

import os
import socket
import uuid


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def process_alive(pid: int) -> bool:
    """Whether process `pid` of this host exists (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_process(owner: str | None) -> tuple[str, int | None]:
    """(host, pid) of an owner id HOST:PID:RANDOM; pid None when the id is not one."""
    host, _, rest = (owner or "").partition(":")
    pid = rest.partition(":")[0]
    return host, int(pid) if pid.isdigit() else None


def owner_gone(owner: str | None) -> bool:
    """Whether an owner id names a process of this host that has ended (other hosts: unknown, False)."""
    host, pid = owner_process(owner)
    return host == socket.gethostname() and pid is not None and not process_alive(pid)


def lease_holds(owner: str | None, lease_until, now) -> bool:
    """Whether a claim still holds: its lease runs past `now` and its process has not ended. A claim
    that does not hold is taken over by the next driver (db/store.py `claim`)."""
    return lease_until is not None and lease_until > now and not owner_gone(owner)
