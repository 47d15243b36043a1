"""Metrics read at scrape time: queue depth from the broker, jobs and GPU-seconds from the database.

The workers write what they did to the database (``jobs.gpu_seconds`` when a job is published), so the
web process's ``/metrics`` can report every installation's GPU time without a push gateway; queue
depth is asked of the broker. A failing source drops its metrics from that scrape and logs why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from bot.models import Job

log = logging.getLogger("kernelize.metrics")


class StateCollector(Collector):
    def __init__(
        self, sessions: sessionmaker[Session], queue_depth: Callable[[], dict[str, int]] | None = None
    ) -> None:
        self.sessions = sessions
        self.queue_depth = queue_depth

    def collect(self) -> Iterator[Metric]:
        if self.queue_depth is not None:
            try:
                depths = self.queue_depth()
            except Exception as exc:  # the broker is down: /healthz says so; the scrape goes on
                log.warning("queue depth unavailable: %s: %s", type(exc).__name__, exc)
            else:
                depth = GaugeMetricFamily(
                    "kernelize_queue_depth", "Tasks waiting in a queue", labels=["queue"]
                )
                for queue, count in sorted(depths.items()):
                    depth.add_metric([queue], count)
                yield depth
        try:
            with self.sessions() as session:
                gpu = session.execute(
                    select(Job.installation_id, func.sum(Job.gpu_seconds)).group_by(Job.installation_id)
                ).all()
                states = session.execute(select(Job.state, func.count()).group_by(Job.state)).all()
        except SQLAlchemyError as exc:
            log.warning("job metrics unavailable: %s: %s", type(exc).__name__, exc)
            return
        seconds = CounterMetricFamily(
            "kernelize_gpu_seconds",
            "GPU seconds spent on candidates, per installation",
            labels=["installation"],
        )
        for installation, total in gpu:
            seconds.add_metric([str(installation)], float(total or 0.0))
        yield seconds
        jobs = GaugeMetricFamily("kernelize_jobs", "Jobs by state", labels=["state"])
        for state, count in states:
            jobs.add_metric([state], count)
        yield jobs
