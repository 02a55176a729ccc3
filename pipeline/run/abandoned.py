"""Jobs their driver abandoned: recorded as running, but no driver is running them any more.

A driver holds the jobs it claimed under a lease it renews every third of SPECFLEET_LEASE_S
(pipeline/run/executor.py), and each job's row names it (db/owners.py: HOST:PID:RANDOM). One
killed, or whose machine went away, leaves its jobs "running". Such a job is one of two kinds:
its driver's process on this host has ended, or its lease ran out (a driver elsewhere stopped
renewing it). Those are exactly the jobs the next run of the spec takes over (db/store.py
`claim`): it records them as failed and runs them again, reusing every finished job.
`specfleet status` shows them as "stale: ..." instead of "running".
"""

from __future__ import annotations

from datetime import UTC, datetime

from db.owners import lease_holds, owner_gone, owner_process


def driver(owner: str) -> str:
    """'pid N on host H' for an owner id HOST:PID:RANDOM (the id as it is, when it is not one)."""
    host, pid = owner_process(owner)
    return f"pid {pid} on host {host}" if host and pid is not None else owner


def stale_reason(job: dict, now: datetime) -> str | None:
    """Why a job (a `Store.jobs()` row) recorded as running has no driver: 'driver gone (pid N on
    host H)' or 'lease expired at T (pid N on host H)'; None for a job not running, or one whose
    driver may still be at it (its lease holds, and it is alive or on another host)."""
    owner = job["owner"]
    if job["status"] != "running" or not owner:
        return None
    if owner_gone(owner):
        return f"driver gone ({driver(owner)})"
    lease = None if job["lease_until"] is None else datetime.fromisoformat(job["lease_until"])
    if lease is not None and not lease_holds(owner, lease, now):
        return f"lease expired at {lease.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC ({driver(owner)})"
    return None


def shown_status(job: dict, now: datetime) -> str:
    """A job's status as `specfleet status` shows it: 'stale: <why>' for an abandoned one."""
    why = stale_reason(job, now)
    return job["status"] if why is None else f"stale: {why}"
