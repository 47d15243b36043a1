"""The embedded broker (``sqla+sqlite:///kernelize-broker.db``): kombu's SQLAlchemy transport, made to
lose nothing when a worker dies.

kombu's transport hides a message when a worker takes it and never looks at it again: every
acknowledged message stays in the table for good, and the message of a worker that died mid-task
(killed, out of memory, the machine restarted) is never delivered again, so its job never ends.
Here, in the workers (``bot.tasks.register`` installs it):

- each delivery is recorded in ``kernelize_delivery``: the message, the worker process that took it
  (host, pid namespace, pid and the process's start time, so a reused pid is another process) and
  when;
- acknowledging or rejecting a message deletes it; one a worker puts back (its warm shutdown, a
  rejection with requeue) is shown again;
- every few seconds a worker gives back the deliveries of worker processes that no longer run on
  its machine, at once, and those of another machine or container after the visibility timeout
  (``KERNELIZE_VISIBILITY_TIMEOUT_S``), as Redis does. A worker started after a crash (``kernelize
  serve`` started again) therefore runs what its predecessor was running when it died.

Messages hidden by a worker without this transport (no record) are left as they are.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from queue import Empty
from typing import Any

from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import sqlalchemy as kombu_sqla
from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table, delete, select, text, update

from runners.celery_app import visibility_timeout

SWEEP_INTERVAL_S = 2.0  # how often a worker looks for the deliveries of workers that died

_metadata = MetaData()
DELIVERIES = Table(
    "kernelize_delivery",
    _metadata,
    Column("message_id", Integer, primary_key=True, autoincrement=False),
    Column("owner", String(255), nullable=False),
    Column("delivered_at", DateTime, nullable=False),  # UTC
)


def install() -> None:
    """Have this process's ``sqla+`` (and ``sqlalchemy+``) broker URLs use this transport."""
    TRANSPORT_ALIASES["sqla"] = TRANSPORT_ALIASES["sqlalchemy"] = f"{__name__}:Transport"


def _utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _machine() -> str:
    """This host and pid namespace: where a process id means the same process."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}|{namespace}"


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from ``/proc``; "" where there is no
    ``/proc``), or None when it is not running (a zombie is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:  # no /proc here: whether the pid exists is all that can be told
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold anything
    return None if fields[0] in ("Z", "X") else fields[19]


def owner_of_this_process() -> str:
    pid = os.getpid()
    return f"{_machine()}|{pid}|{_started(pid) or ''}"


def orphaned(owner: str, delivered_at: datetime, now: datetime) -> bool:
    """Whether the delivery ``owner`` took at ``delivered_at`` is to be given back."""
    parts = owner.rsplit("|", 2)  # machine, pid, start time
    if len(parts) != 3 or parts[0] != _machine() or not parts[1].isdigit():
        return delivered_at < now - timedelta(seconds=visibility_timeout())
    running = _started(int(parts[1]))
    return running is None or (bool(parts[2]) and bool(running) and running != parts[2])


class Channel(kombu_sqla.Channel):
    """kombu's SQLAlchemy channel with deliveries recorded, acknowledged messages deleted and the
    deliveries of dead workers given back."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self._rows: dict[str, int] = {}  # delivery tag -> message row, for what this channel took
        self._owner = owner_of_this_process()
        self._next_sweep = 0.0
        # One session per channel; a pool that acknowledges from its own threads takes turns on it.
        self._lock = threading.RLock()

    def _open(self) -> Any:
        opened = super()._open()  # type: ignore[no-untyped-call]
        DELIVERIES.create(opened[0], checkfirst=True)
        return opened

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + SWEEP_INTERVAL_S
            self.give_back_orphans()
        with self._lock:
            return self._take(queue)

    def _take(self, queue: str) -> dict[str, Any]:
        """kombu's ``_get``, recording the delivery in the same transaction."""
        found = self._get_or_create(queue)  # type: ignore[no-untyped-call]
        session = self.session
        if session.bind.name == "sqlite":
            session.execute(text("BEGIN IMMEDIATE TRANSACTION"))
        try:
            msg = (
                session.query(self.message_cls)
                .with_for_update()
                .filter(self.message_cls.queue_id == found.id)
                .filter(self.message_cls.visible != False)  # noqa: E712 (SQL, not Python)
                .order_by(self.message_cls.sent_at)
                .order_by(self.message_cls.id)
                .limit(1)
                .first()
            )
            if msg is None:
                raise Empty()
            msg.visible = False
            session.execute(delete(DELIVERIES).where(DELIVERIES.c.message_id == msg.id))
            session.execute(
                DELIVERIES.insert().values(message_id=msg.id, owner=self._owner, delivered_at=_utcnow())
            )
            raw = msg.payload
            payload: dict[str, Any] = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
            tag = payload.get("properties", {}).get("delivery_tag")
            if tag is not None:
                self._rows[tag] = int(msg.id)
            return payload
        finally:
            session.commit()

    def basic_ack(self, delivery_tag: str, multiple: bool = False) -> None:
        super().basic_ack(delivery_tag, multiple)  # type: ignore[no-untyped-call]
        self._forget(delivery_tag)

    def basic_reject(self, delivery_tag: str, requeue: bool = False) -> None:
        super().basic_reject(delivery_tag, requeue=requeue)  # type: ignore[no-untyped-call]
        self._forget(delivery_tag)

    def _restore(self, message: Any) -> None:
        """A message this worker puts back (its warm shutdown, a rejection with requeue): shown
        again where it is, rather than copied (kombu's way, which left the original hidden)."""
        row = self._rows.pop(message.delivery_tag, None)
        if row is None:
            super()._restore(message)  # type: ignore[no-untyped-call]
        else:
            self._give_back(row, self._owner)

    def _forget(self, delivery_tag: str) -> None:
        row = self._rows.pop(delivery_tag, None)
        if row is None:
            return
        with self._lock:
            session = self.session
            session.execute(delete(DELIVERIES).where(DELIVERIES.c.message_id == row))
            session.execute(delete(self.message_cls).where(self.message_cls.id == row))
            session.commit()

    def _give_back(self, row: int, owner: str) -> bool:
        """Show message ``row`` again, if ``owner`` still holds it (one worker wins a race)."""
        with self._lock:
            session = self.session
            taken = session.execute(
                delete(DELIVERIES).where(DELIVERIES.c.message_id == row, DELIVERIES.c.owner == owner)
            )
            if taken.rowcount:
                message = self.message_cls
                session.execute(update(message).where(message.id == row).values(visible=True))
            session.commit()
            return bool(taken.rowcount)

    def give_back_orphans(self) -> int:
        """Give back the deliveries of workers that died (see the module's docstring); how many."""
        now = _utcnow()
        with self._lock:
            held = self.session.execute(select(DELIVERIES)).all()
            self.session.commit()
        back = 0
        for row, owner, delivered_at in held:
            if owner != self._owner and orphaned(owner, delivered_at, now) and self._give_back(row, owner):
                back += 1
        return back


class Transport(kombu_sqla.Transport):
    Channel = Channel
