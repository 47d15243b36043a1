"""Webhook ingest: signed deliveries per second through the real web edge, and proof of exactly-once.

    .venv/bin/python bench/webhook_ingest.py [--deliveries 2000] [--concurrency 32] [--redeliveries 0.1]
        [--client raw|httpx] [--warmup 50] [--seed 0] [--servers 1] [--rate PER_SECOND]
        [--enqueue send_task|publisher]

Starts ``bot.web.create_app`` under uvicorn in --servers separate processes, each on a port of its
own as several ``kernelize serve --no-worker`` behind a proxy are, each wired as ``kernelize serve``
wires it (real ``bot.events.decide``, Celery over Redis, JSON logs at INFO; --enqueue publisher
swaps ``celery_enqueue`` for ``bot.enqueue.celery_publisher``), against PostgreSQL (a fresh schema
in database ``test``, dropped afterwards) and a ``redis-server`` of its own on a free port. Fires
--deliveries signed ``pull_request.opened`` deliveries, each with its own X-GitHub-Delivery, from
--concurrency asyncio clients, each on its own keep-alive connection to one of the servers (client
i to server i mod --servers), plus a fraction of redeliveries (an already-sent delivery id and body
again). Closed loop by default (each client sends when its last delivery is answered: the most the
servers take); --rate sends on a schedule instead, as GitHub does, and times each delivery from
when it was due. The default client writes HTTP/1.1 by hand because httpx.AsyncClient (--client
httpx) spends more CPU per request than the server does, which on a 2-core machine measures the
client. Prints markdown tables: throughput, time-to-response percentiles, status codes, and the
exactly-once check: messages in the Redis ``github`` queue, distinct task ids and rows in
``deliveries`` must all equal the deliveries accepted (202), and a redelivery of an accepted
delivery must get 200 "duplicate". Exits 1 when they disagree.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PAYLOAD = ROOT / "tests/fixtures/github-webhooks/payload-examples/pull_request/opened.payload.json"
PG_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test"
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
SECRET = "kernelize-bench-webhook-secret-5b9e1c"
PORT_ENV = "KERNELIZE_BENCH_PORT"  # the port the server process listens on
ENQUEUE_ENV = "KERNELIZE_BENCH_ENQUEUE"  # send_task or publisher


# --- the server process ------------------------------------------------------------------------


def app_from_env() -> Any:
    """The app as ``kernelize serve`` builds it, from KERNELIZE_* variables (no .env file); the
    enqueue is ``celery_enqueue`` (what ``kernelize serve`` wires) or bot.enqueue's publisher."""
    from bot import db
    from bot.cli import JsonFormatter
    from bot.enqueue import celery_publisher
    from bot.events import decide as events_decide
    from bot.settings import load_settings
    from bot.web import create_app
    from runners.celery_app import celery_broker_ok, celery_enqueue, make_celery

    settings = load_settings(_env_file=None)
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    engine = db.make_engine(settings.database_url)
    db.create_schema(engine)
    celery = make_celery(settings.broker_url, settings.result_backend)

    def decide(event: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        return events_decide(event, payload, app_id=settings.github_app_id)

    return create_app(
        settings,
        decide=decide,
        enqueue=(celery_publisher if os.environ[ENQUEUE_ENV] == "publisher" else celery_enqueue)(celery),
        session_factory=db.session_factory(engine),
        broker_ok=celery_broker_ok(celery),
    )


def serve() -> None:
    import uvicorn

    app = app_from_env()
    # As `kernelize serve` runs it: uvicorn binds host and port itself (an inherited fd would come in as
    # AF_UNIX, without TCP_NODELAY, adding Nagle + delayed-ACK stalls of ~40 ms to every response).
    # log_config=None, access log on: the same lines `kernelize serve` writes, through the JSON handler.
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ[PORT_ENV]), log_config=None)


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_redis(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A ``redis-server`` of the run's own on a free port, nothing saved: no other user of the
    machine's Redis can consume or flush the queue the exactly-once check reads."""
    port = free_port()
    args = [
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(folder),
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    proc = subprocess.Popen(["redis-server", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"redis://127.0.0.1:{port}/0"
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"redis-server did not start on port {port}")
        time.sleep(0.05)


def start_servers(database_url: str, redis_url: str, log_paths: list[Path], enqueue: str) -> list[Server]:
    """One server process per log path, each on a port of its own, started together; returns once
    every one answers /healthz."""
    import httpx

    servers = []
    for log_path in log_paths:
        port = free_port()  # for the server to bind
        env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELIZE_")}
        env |= {
            "KERNELIZE_WEBHOOK_SECRET": SECRET,
            "KERNELIZE_DATABASE_URL": database_url,
            "KERNELIZE_BROKER_URL": redis_url,
            PORT_ENV: str(port),
            ENQUEUE_ENV: enqueue,
            "PYTHONPATH": str(ROOT),
        }
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, __file__, "--serve"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        servers.append(Server(proc, f"http://127.0.0.1:{port}", log_path))
    deadline = time.monotonic() + 60
    with httpx.Client(timeout=5) as client:
        for server in servers:
            while True:
                if server.proc.poll() is not None:
                    log_text = server.log_path.read_text()[-2000:]
                    raise RuntimeError(f"the server exited ({server.proc.returncode}): {log_text}")
                try:
                    if client.get(f"{server.url}/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the server did not become healthy within 60 s")
                time.sleep(0.1)
    return servers


# --- deliveries --------------------------------------------------------------------------------


@dataclass
class Delivery:
    delivery_id: str
    body: bytes
    signature: str


@dataclass
class Result:
    delivery_id: str
    redelivery: str  # "": the first delivery; "after": its first was answered 202; "racing": still in flight
    warmup: bool
    status: str  # "202", "200", ... or "error:<exception>"
    answer: str | None  # the body's "status" field
    seconds: float


def make_deliveries(n: int, rng: random.Random) -> list[Delivery]:
    from bot.webhooks import sign

    template = json.loads(PAYLOAD.read_bytes())
    # What bot.events.decide needs to return a job: an installation, a human sender, not a draft.
    template["installation"] = {"id": 1, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ=="}
    template["sender"]["type"] = "User"
    template["pull_request"]["draft"] = False
    deliveries = []
    for i in range(n):
        number = 1000 + i
        template["number"] = template["pull_request"]["number"] = number
        template["pull_request"]["head"]["sha"] = rng.randbytes(20).hex()
        body = json.dumps(template).encode()
        deliveries.append(Delivery(str(uuid.UUID(int=rng.getrandbits(128), version=4)), body, ""))
        deliveries[-1].signature = sign(SECRET.encode(), body)
    return deliveries


@dataclass
class Plan:
    """Unique deliveries in order, redeliveries mixed in at random places. A redelivery picks, when
    it is sent, a delivery already answered 202; before the first answer, one still in flight (a
    race GitHub can make too: the database's unique key must still let only one through)."""

    fresh: list[Delivery]
    kinds: list[bool]  # True: a redelivery; the first is never one
    rng: random.Random
    sent: list[Delivery] = field(default_factory=list)
    accepted: list[Delivery] = field(default_factory=list)
    position: int = 0

    def next(self) -> tuple[Delivery, str] | None:
        if self.position >= len(self.kinds):
            return None
        redelivery = self.kinds[self.position]
        self.position += 1
        if redelivery:
            if self.accepted:
                return self.rng.choice(self.accepted), "after"
            return self.rng.choice(self.sent), "racing"
        delivery = self.fresh[len(self.sent)]
        self.sent.append(delivery)
        return delivery, ""


def _headers(delivery: Delivery) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/bench",
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": delivery.delivery_id,
        "X-Hub-Signature-256": delivery.signature,
    }


class RawConnection:
    """One keep-alive HTTP/1.1 connection written and parsed by hand: a load generator that costs
    little CPU, so that on a small machine the server, not the client, gets the cores."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        if self.streams is None:
            self.streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.streams
        lines = [f"POST {path} HTTP/1.1", f"Host: {self.host}:{self.port}", f"Content-Length: {len(body)}"]
        lines += [f"{key}: {value}" for key, value in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            status_line, *header_lines = head.decode("latin-1").split("\r\n")
            fields = dict(line.lower().split(": ", 1) for line in header_lines if ": " in line)
            answer = await reader.readexactly(int(fields["content-length"]))
        except BaseException:
            self.close()
            raise
        if fields.get("connection") == "close":
            self.close()
        return int(status_line.split()[1]), answer

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


async def fire(
    urls: list[str], plan: Plan, concurrency: int, warmup: bool, client: str, rate: float | None = None
) -> tuple[list[Result], float]:
    """Post the plan's deliveries from ``concurrency`` workers, worker i to server i mod len(urls)
    (as a proxy spreads connections over its upstreams). Closed loop by default: each worker sends
    its next delivery when the last is answered, each result timed from send to answer. With
    ``rate``, open loop: delivery k is due k/rate seconds after the start, as GitHub sends them
    whatever the answers, and is timed from when it was due, so a delivery that waited for a free
    connection (all ``concurrency`` busy) counts that wait."""
    import httpx

    results: list[Result] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    shared = [httpx.AsyncClient(base_url=url, limits=limits, timeout=30) for url in urls]
    start = time.perf_counter()

    async def worker(number: int) -> None:
        host, port = urls[number % len(urls)].removeprefix("http://").split(":")
        raw, http = RawConnection(host, int(port)), shared[number % len(urls)]
        while (item := plan.next()) is not None:
            delivery, redelivery = item
            sent = time.perf_counter()
            if rate is not None:
                sent = start + (plan.position - 1) / rate
                await asyncio.sleep(max(0.0, sent - time.perf_counter()))
            try:
                if client == "raw":
                    code, content = await asyncio.wait_for(
                        raw.post("/webhook", delivery.body, _headers(delivery)), 30
                    )
                else:
                    response = await http.post("/webhook", content=delivery.body, headers=_headers(delivery))
                    code, content = response.status_code, response.content
                status, answer = str(code), json.loads(content).get("status")
            except Exception as exc:  # transport errors, timeouts, a body that is not JSON
                status, answer = f"error:{type(exc).__name__}", None
            seconds = time.perf_counter() - sent
            if status == "202" and not redelivery:
                plan.accepted.append(delivery)
            results.append(Result(delivery.delivery_id, redelivery, warmup, status, answer, seconds))
        raw.close()

    try:
        await asyncio.gather(*(worker(number) for number in range(concurrency)))
    finally:
        for http in shared:
            await http.aclose()
    return results, time.perf_counter() - start


# --- measurements ------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def cpu_ticks(pids: list[int] | None = None, names: tuple[str, ...] = ()) -> dict[int, int]:
    """utime + stime (clock ticks) of the given processes, or of every process whose name is in names."""
    ticks = {}
    candidates = pids if pids is not None else [int(p) for p in os.listdir("/proc") if p.isdigit()]
    for pid in candidates:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        comm, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        if pids is not None or comm in names:
            ticks[pid] = int(rest[11]) + int(rest[12])
    return ticks


def machine_busy() -> tuple[int, int, int]:
    """(busy, total, steal) clock ticks of all CPUs, from /proc/stat; steal: taken by the hypervisor."""
    user, nice, system, idle, iowait, irq, softirq, steal = (
        int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]
    )
    busy = user + nice + system + irq + softirq
    return busy, busy + idle + iowait + steal, steal


@dataclass
class CpuSnapshot:
    server: dict[int, int]
    client: float
    postgres: dict[int, int]
    redis: dict[int, int]
    machine: tuple[int, int, int]

    @classmethod
    def take(cls, server_pids: list[int], redis_pid: int) -> CpuSnapshot:
        usage = os.times()
        return cls(
            cpu_ticks(server_pids),
            usage.user + usage.system,
            cpu_ticks(names=("postgres",)),
            cpu_ticks([redis_pid]),
            machine_busy(),
        )


def cpu_split(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, float]:
    hz = os.sysconf("SC_CLK_TCK")

    def spent(a: dict[int, int], b: dict[int, int]) -> float:
        return sum(b[pid] - a.get(pid, 0) for pid in b) / hz

    busy = after.machine[0] - before.machine[0]
    total = after.machine[1] - before.machine[1]
    split = {
        "server": spent(before.server, after.server),
        "client": after.client - before.client,
        "postgres": spent(before.postgres, after.postgres),
        "redis": spent(before.redis, after.redis),
    }
    # Everything else on the machine: the kernel's own work, processes that exited during the run
    # (PostgreSQL backends of connections opened and closed), and any load from outside the benchmark.
    split["other"] = max(0.0, busy / hz - sum(split.values()))
    split["machine_busy"] = busy / total if total else 0.0
    split["steal"] = (after.machine[2] - before.machine[2]) / total if total else 0.0
    return split


def pg_sessions(pg: Any) -> int:
    """Sessions ever opened on database ``test`` (PostgreSQL 14+): new connections, whoever made them."""
    return int(pg.execute("SELECT sessions FROM pg_stat_database WHERE datname = 'test'").fetchone()[0])


def background_busy(seconds: float = 1.0) -> float:
    """The share of all CPUs busy while this process sleeps: load the benchmark did not make."""
    before = machine_busy()
    time.sleep(seconds)
    after = machine_busy()
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total else 0.0


def versions(pg: Any, redis_client: Any) -> dict[str, str]:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "?",
    )
    packages = ("uvicorn", "fastapi", "sqlalchemy", "psycopg", "celery", "kombu", "redis", "httpx")
    found = []
    for name in packages:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    extras = [name for name in ("uvloop", "httptools") if _installed(name)]
    return {
        "CPUs": f"{os.cpu_count()} ({model})",
        "Python": platform.python_version(),
        "PostgreSQL": pg.execute("SHOW server_version").fetchone()[0],
        "Redis": redis_client.info("server")["redis_version"],
        "packages": ", ".join(found),
        "uvicorn loop/http": ("uvloop/httptools: " + ", ".join(extras)) if extras else "asyncio + h11",
    }


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def queued(redis_client: Any, queue: str) -> list[str]:
    """Task ids of the messages waiting in a kombu Redis queue (a list of JSON envelopes)."""
    ids = []
    for raw in redis_client.lrange(queue, 0, -1):
        message = json.loads(raw)
        ids.append(message["headers"]["id"])
        json.loads(base64.b64decode(message["body"]))  # a well-formed body, or this raises
    return ids


def server_log_levels(path: Path) -> Counter[str]:
    levels: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        try:
            levels[json.loads(line).get("level", "?")] += 1
        except (json.JSONDecodeError, AttributeError):
            levels["non-JSON line"] += 1
    return levels


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def latency_row(label: str, values: list[float]) -> str:
    if not values:
        return f"| {label} | 0 | – | – | – | – |"
    p50, p90, p99 = (percentile(values, q) for q in (50, 90, 99))
    return f"| {label} | {len(values)} | {ms(p50)} | {ms(p90)} | {ms(p99)} | {ms(max(values))} |"


# --- main --------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=2000, help="unique deliveries (default 2000)")
    parser.add_argument("--concurrency", type=int, default=32, help="concurrent clients (default 32)")
    parser.add_argument(
        "--redeliveries", type=float, default=0.1, help="redeliveries, a fraction of --deliveries (0.1)"
    )
    parser.add_argument("--warmup", type=int, default=50, help="unique deliveries before timing (50)")
    parser.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="raw: hand-written keep-alive HTTP/1.1 on asyncio streams (default, cheap on CPU); "
        "httpx: one httpx.AsyncClient",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--servers", type=int, default=1, help="server processes, each on its own port (default 1)"
    )
    parser.add_argument(
        "--enqueue",
        choices=("send_task", "publisher"),
        default="send_task",
        help="send_task: runners.celery_app.celery_enqueue, as kernelize serve wires it (default); "
        "publisher: bot.enqueue.celery_publisher",
    )
    parser.add_argument(
        "--rate",
        type=float,
        help="open loop: deliveries per second on a schedule, at most --concurrency in flight "
        "(default: closed loop)",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the server process
    args = parser.parse_args()
    if args.serve:
        serve()
        return 0
    if args.deliveries < 1 or args.concurrency < 1 or not 0 <= args.redeliveries <= 1 or args.warmup < 0:
        parser.error("--deliveries and --concurrency >= 1, 0 <= --redeliveries <= 1, --warmup >= 0")
    if args.servers < 1 or (args.rate is not None and args.rate <= 0):
        parser.error("--servers >= 1, --rate > 0")

    import psycopg
    import redis

    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="kz-bench-"))
    redis_proc, redis_url = start_redis(tmp)
    redis_client = redis.Redis.from_url(redis_url)
    schema = f"kz_bench_{uuid.uuid4().hex[:12]}"
    pg = psycopg.connect(PG_DSN, autocommit=True)
    pg.execute(f'CREATE SCHEMA "{schema}"')
    database_url = f"{PG_URL}?options=-csearch_path%3D{schema}"
    servers: list[Server] = []
    logs = [tmp / f"server-{number}.log" for number in range(args.servers)]
    try:
        info = versions(pg, redis_client)
        deliveries = make_deliveries(args.warmup + args.deliveries, rng)
        servers = start_servers(database_url, redis_url, logs, args.enqueue)
        urls, pids = [server.url for server in servers], [server.proc.pid for server in servers]

        warm = Plan(deliveries[: args.warmup], [False] * args.warmup, rng)
        warm_results, _ = asyncio.run(fire(urls, warm, args.concurrency, True, args.client))
        redeliveries = round(args.deliveries * args.redeliveries)
        kinds = [False] * args.deliveries + [True] * redeliveries
        rng.shuffle(kinds)
        first = kinds.index(False)
        kinds[0], kinds[first] = kinds[first], kinds[0]
        plan = Plan(deliveries[args.warmup :], kinds, rng)
        idle_before = background_busy()
        sessions_before = pg_sessions(pg)
        before = CpuSnapshot.take(pids, redis_proc.pid)
        results, wall = asyncio.run(fire(urls, plan, args.concurrency, False, args.client, args.rate))
        cpu = cpu_split(before, CpuSnapshot.take(pids, redis_proc.pid))
        sessions_opened = pg_sessions(pg) - sessions_before

        task_ids = queued(redis_client, "github")
        gpu_queued = redis_client.llen("gpu")
        table = f'"{schema}".deliveries'
        rows = pg.execute(f"SELECT delivery_id, outcome, job_id FROM {table}").fetchall()
    finally:
        for server in servers:
            server.stop()
        pg.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        pg.close()
        redis_client.close()
        redis_proc.terminate()
        redis_proc.wait(10)

    everything = warm_results + results
    by_id: dict[str, Counter[str]] = {}
    for r in everything:
        by_id.setdefault(r.delivery_id, Counter())[f"{r.status} {r.answer}"] += 1
    accepted = {d for d, c in by_id.items() if c["202 enqueued"] >= 1}
    twice = sorted(d for d, c in by_id.items() if c["202 enqueued"] > 1)
    orphan_duplicates = sorted(d for d, c in by_id.items() if c["200 duplicate"] and d not in accepted)
    expected_tasks = {f"delivery-{d}" for d in accepted}
    row_ids = {row[0] for row in rows}
    bad_rows = [row for row in rows if row[1] != "enqueued" or row[2] != f"delivery-{row[0]}"]
    # A redelivery sent after its delivery was answered 202 must be a duplicate. One racing its
    # delivery may win (202, the first then gets the duplicate): the checks above still want one 202.
    redelivered = [r for r in results if r.redelivery == "after"]
    redelivery_dupes = sum(1 for r in redelivered if (r.status, r.answer) == ("200", "duplicate"))
    racing = Counter(f"{r.status} {r.answer}" for r in results if r.redelivery == "racing")
    checks = {
        "Redis `github` messages = deliveries accepted (202)": len(task_ids) == len(accepted),
        "distinct task ids = deliveries accepted": len(set(task_ids)) == len(accepted),
        "task ids = `delivery-<id>` of the accepted ids": set(task_ids) == expected_tasks,
        "Redis `gpu` queue empty": gpu_queued == 0,
        "`deliveries` rows = deliveries accepted, same ids": len(rows) == len(accepted)
        and row_ids == accepted,
        "every row `enqueued` with job id `delivery-<id>`": not bad_rows,
        "no delivery id answered 202 twice": not twice,
        "no `duplicate` for an id never accepted": not orphan_duplicates,
        "every redelivery sent after its 202 answered 200 `duplicate`": redelivery_dupes == len(redelivered),
    }

    statuses = Counter(f"{r.status} {r.answer}" if r.answer else r.status for r in results)
    ok_202 = [r.seconds for r in results if r.status == "202"]
    dup_200 = [r.seconds for r in results if r.status == "200"]
    levels: Counter[str] = Counter()
    for log in logs:
        levels += server_log_levels(log)
    shutil.rmtree(tmp)

    print(
        f"## Webhook ingest: {args.deliveries} deliveries + {redeliveries} redeliveries, "
        f"{args.concurrency} concurrent clients ({args.client}), {args.servers} server process(es), "
        f"enqueue {args.enqueue}, " + (f"open loop at {args.rate:g}/s\n" if args.rate else "closed loop\n")
    )
    print("| machine | |\n|---|---|")
    for key, value in info.items():
        print(f"| {key} | {value} |")
    print(f"\nSeed {args.seed}; {args.warmup} warm-up deliveries before timing (checked, not timed).\n")
    print("| measure | value |\n|---|---|")
    print(f"| requests (timed) | {len(results)} |")
    print(f"| wall s | {wall:.2f} |")
    print(f"| requests/s | {len(results) / wall:.0f} |")
    print(f"| accepted deliveries/s (202) | {len(ok_202) / wall:.0f} |")
    print(f"| status codes | {', '.join(f'{k}: {v}' for k, v in sorted(statuses.items()))} |")
    raced = ", ".join(f"{k}: {v}" for k, v in sorted(racing.items())) or "none"
    print(f"| redeliveries sent while their delivery was in flight | {raced} |")
    print(
        f"| CPU s during the run | server {cpu['server']:.1f}, client {cpu['client']:.1f}, "
        f"postgres {cpu['postgres']:.1f}, redis {cpu['redis']:.1f}, everything else {cpu['other']:.1f} "
        f"(all CPUs {cpu['machine_busy']:.0%} busy, {cpu['steal']:.0%} stolen by the hypervisor) |"
    )
    print(f"| CPUs busy in the idle second before the run | {idle_before:.0%} |")
    print(f"| PostgreSQL connections opened during the run | {sessions_opened} |")
    print(f"| server log lines | {', '.join(f'{k}: {v}' for k, v in sorted(levels.items()))} |")
    print("\nTime to response (client side, ms):\n")
    print("| answer | n | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|")
    print(latency_row("202 enqueued", ok_202))
    print(latency_row("200 duplicate", dup_200))
    print("\nExactly once (warm-up included):\n")
    print("| check | counted | result |\n|---|---|---|")
    counted = [
        f"{len(task_ids)} vs {len(accepted)}",
        f"{len(set(task_ids))} vs {len(accepted)}",
        f"{len(set(task_ids) ^ expected_tasks)} differ",
        f"{gpu_queued}",
        f"{len(rows)} vs {len(accepted)}",
        f"{len(bad_rows)} bad",
        f"{len(twice)}",
        f"{len(orphan_duplicates)}",
        f"{redelivery_dupes} of {len(redelivered)}",
    ]
    for (name, ok), count in zip(checks.items(), counted, strict=True):
        print(f"| {name} | {count} | {'ok' if ok else 'FAIL'} |")
    failed = [name for name, ok in checks.items() if not ok]
    if failed:
        print(f"\nexactly-once FAILED: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
