"""Jobs and installations on both databases: limits, cancel that sticks, installation bookkeeping."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import update

from bot import db, jobs
from bot.models import Installation, Job

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "github-webhooks" / "payload-examples"


def _sessions(database_url: str):
    engine = db.make_engine(database_url)
    db.create_schema(engine)
    return db.session_factory(engine)


def _job(installation: int, state: str, **kw) -> Job:
    return Job(
        key=kw.pop("key", f"k-{state}"),
        installation_id=installation,
        repository=kw.pop("repository", "octo/models"),
        pull_number=kw.pop("pull_number", 1),
        head_sha="a" * 40,
        reason="pull_request.opened",
        state=state,
        **kw,
    )


def test_concurrency_limit_counts_running_jobs_of_the_installation_only(database_url: str) -> None:
    sessions = _sessions(database_url)
    limits = jobs.JobLimits(concurrent_jobs=2, gpu_minutes_per_day=60)
    with sessions() as s, s.begin():
        mine = _job(1, "queued", key="mine")
        s.add_all([mine, _job(1, "running", key="a"), _job(2, "running", key="b"), _job(1, "done", key="c")])
        s.flush()
        assert jobs.wait_reason(s, 1, limits, mine.id) is None  # one running here; the other is elsewhere
        s.add(_job(1, "running", key="d"))
        s.flush()
        reason = jobs.wait_reason(s, 1, limits, mine.id)
        assert reason is not None and "2 Kernelize job(s) are running" in reason and "limit 2" in reason
        # A job "running" for longer than any task can run died with its worker: it holds no slot.
        stale = datetime.now(UTC) - jobs.STALE_AFTER - timedelta(minutes=1)
        s.execute(update(Job).where(Job.key == "d").values(created_at=stale))
        assert jobs.wait_reason(s, 1, limits, mine.id) is None


def test_two_plans_racing_for_the_last_slot_take_it_one_at_a_time(database_url: str) -> None:
    """Plan A holds the installation's slots while it decides; plan B, deciding at the same moment,
    waits for A's commit and then sees A running: never both."""
    import threading

    sessions = _sessions(database_url)
    limits = jobs.JobLimits(concurrent_jobs=2, gpu_minutes_per_day=60)
    with sessions() as s, s.begin():
        s.add_all([_job(1, "running", key="busy"), _job(1, "queued", key="a"), _job(1, "queued", key="b")])
    with sessions() as s:
        a_id, b_id = (s.query(Job.id).filter(Job.key == k).scalar() for k in ("a", "b"))
    b_decided: list[str | None] = []
    b_started = threading.Event()

    def plan_b() -> None:
        with sessions() as s, s.begin():
            b_started.set()
            jobs.lock_installation(s, 1)  # waits here while A holds the slots
            b_decided.append(jobs.wait_reason(s, 1, limits, b_id))
            if b_decided[-1] is None:
                s.get(Job, b_id).state = "running"

    with sessions() as s, s.begin():
        jobs.lock_installation(s, 1)
        assert jobs.wait_reason(s, 1, limits, a_id) is None  # the last slot: A takes it
        s.get(Job, a_id).state = "running"
        racer = threading.Thread(target=plan_b)
        racer.start()
        b_started.wait(5)
        racer.join(1.0)
        assert racer.is_alive() and b_decided == []  # B has not decided while A holds the lock
    racer.join(20)
    assert len(b_decided) == 1 and b_decided[0] is not None and "limit 2" in b_decided[0]
    with sessions() as s:
        assert jobs.active_jobs(s, 1) == 2


def test_the_daily_gpu_budget_counts_since_midnight_utc(database_url: str) -> None:
    sessions = _sessions(database_url)
    limits = jobs.JobLimits(concurrent_jobs=5, gpu_minutes_per_day=10)
    yesterday = datetime.now(UTC) - timedelta(days=1, hours=1)
    with sessions() as s, s.begin():
        mine = _job(1, "queued", key="mine")
        s.add_all([mine, _job(1, "done", key="old", gpu_seconds=3600.0, created_at=yesterday)])
        s.add(_job(1, "done", key="today", gpu_seconds=540.0))
        s.flush()
        assert jobs.gpu_seconds_today(s, 1) == 540.0
        assert jobs.wait_reason(s, 1, limits, mine.id) is None
        s.add(_job(1, "done", key="more", gpu_seconds=61.0))
        s.flush()
        reason = jobs.wait_reason(s, 1, limits, mine.id)
        assert reason is not None and "10 GPU-minutes" in reason and "00:00 UTC" in reason
    assert 0 < jobs.seconds_to_midnight() <= 86400


def test_a_cancel_sticks_when_the_results_arrive_later(database_url: str) -> None:
    sessions = _sessions(database_url)
    with sessions() as s, s.begin():
        job = _job(1, "running")
        s.add(job)
        s.flush()
        job_id = job.id
    with sessions() as s, s.begin():
        [found] = jobs.pull_jobs(s, "octo/models", 1)
        found.state = "cancelled"
    with sessions() as s, s.begin():
        done = jobs.finish(s, job_id, "done", gpu_seconds=12.5)
        assert done is not None and done.state == "cancelled" and done.gpu_seconds == 12.5
    with sessions() as s:
        assert jobs.pull_jobs(s, "octo/models", 1) == []
        assert [j.state for j in jobs.pull_jobs(s, "octo/models", 1, active=False)] == ["cancelled"]


def test_installation_events_keep_the_installation_current(database_url: str) -> None:
    sessions = _sessions(database_url)

    def load(name: str) -> dict:
        return json.loads((EXAMPLES / name).read_text())

    created = load("installation/created.payload.json")
    inst_id = created["installation"]["id"]
    steps = [
        ("installation", created),
        ("installation_repositories", load("installation_repositories/added.payload.json")),
        ("installation_repositories", load("installation_repositories/removed.payload.json")),
        ("installation", load("installation/suspend.payload.json")),
    ]
    for event, payload in steps:
        payload["installation"]["id"] = inst_id
        with sessions() as s, s.begin():
            jobs.record_installation(s, event, payload)
    expected = {r["full_name"] for r in created["repositories"]}
    expected |= {r["full_name"] for r in steps[1][1]["repositories_added"]}
    expected -= {r["full_name"] for r in steps[2][1]["repositories_removed"]}
    with sessions() as s:
        row = s.get(Installation, inst_id)
        assert row is not None and row.suspended and not row.deleted
        assert set(row.repositories) == expected
    unsuspend = load("installation/unsuspend.payload.json")
    unsuspend["installation"]["id"] = inst_id
    with sessions() as s, s.begin():
        jobs.record_installation(s, "installation", unsuspend)
        jobs.record_installation(s, "installation", unsuspend)  # a replay changes nothing
    with sessions() as s:
        row = s.get(Installation, inst_id)
        assert row is not None and not row.suspended and set(row.repositories) == expected


def _progress(sent: str, *states: str) -> dict[str, object]:
    modules = [{"target": f"m.py::C{i}", "state": s} for i, s in enumerate(states)]
    return {"sent": sent, "seq": 0, "modules": modules}


def test_work_ahead_counts_unfinished_modules_sent_to_the_gpus_earlier(database_url: str) -> None:
    sessions = _sessions(database_url)
    with sessions() as s, s.begin():
        mine = _job(
            1, "running", key="mine", progress=_progress("2026-12-01T10:00:05.000000+00:00", "queued")
        )
        s.add_all(
            [
                mine,
                # Another installation's job, sent earlier: one done, one running, one queued.
                _job(
                    2,
                    "running",
                    key="a",
                    progress=_progress("2026-12-01T10:00:01.000000+00:00", "done", "running", "queued"),
                ),
                _job(1, "running", key="b", progress=_progress("2026-12-01T10:00:02.000000+00:00", "queued")),
                # Sent later (it waited for its limits), finished, or with nothing left: not ahead.
                _job(1, "running", key="c", progress=_progress("2026-12-01T10:00:09.000000+00:00", "queued")),
                _job(1, "done", key="d", progress=_progress("2026-12-01T10:00:00.000000+00:00", "queued")),
                _job(
                    1,
                    "running",
                    key="e",
                    progress=_progress("2026-12-01T10:00:00.000000+00:00", "done", "error"),
                ),
                _job(1, "running", key="f"),  # planned before progress was recorded
            ]
        )
        s.flush()
        assert jobs.work_ahead(s, mine) == (3, 2)
        mine.progress = None
        assert jobs.work_ahead(s, mine) == (0, 0)


def test_lock_job_reads_the_job_for_a_write(database_url: str) -> None:
    sessions = _sessions(database_url)
    with sessions() as s, s.begin():
        job = _job(1, "running", key="locked")
        s.add(job)
        s.flush()
        job_id = job.id
    with sessions() as s, s.begin():
        locked = jobs.lock_job(s, job_id)
        assert locked is not None and locked.state == "running"
        locked.progress = {"seq": 1}
        assert jobs.lock_job(s, -5) is None
    with sessions() as s:
        again = s.get(Job, job_id)
        assert again is not None and again.progress == {"seq": 1}
