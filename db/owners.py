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


def owner_gone(owner: str | None) -> bool:
    """Whether an owner id names a process of this host that has ended (other hosts: unknown, False)."""
    host, _, rest = (owner or "").partition(":")
    pid = rest.partition(":")[0]
    return host == socket.gethostname() and pid.isdigit() and not process_alive(int(pid))
