"""runners.sandbox.run against real child processes (targets in sandbox_targets.py)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from runners import sandbox
from runners.sandbox import Limits

TARGETS = "tests.runners.sandbox_targets"
ROOT = Path(__file__).resolve().parents[2]


TESTS = [ROOT / "tests"]  # the targets' package, readable in the sandbox


def run(name: str, request: dict | None = None, *, timeout_s: float = 30, memory_mb: int = 2048, **kw):
    limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb)
    return sandbox.run(f"{TARGETS}:{name}", request or {}, limits, readable=TESTS, **kw)


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _wait_gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def _kill_if_alive(pid: int) -> None:
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


def host_pids_with(marker: str) -> list[int]:
    """Live processes of this host whose command line carries ``marker`` (seen from outside)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                if marker.encode() in fh.read() and _alive(int(name)):
                    found.append(int(name))
        except OSError:
            continue
    return found


def find_then_return(seen: list[int], marker: str):
    """A follow-up that records, from outside, the host pids of what the sandbox started."""

    def follow(_interim):
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            seen.extend(host_pids_with(marker))
            time.sleep(0.05)
        return {}

    return follow


def test_targets_module_is_importable_in_the_child():
    res = run("echo", {"n": 7})
    assert res.outcome == "ok", res.reason
    assert res.payload is not None
    assert res.payload["request"] == {"n": 7}
    assert res.payload["pid"] != os.getpid()
    assert res.reason == ""
    assert res.returncode == 0


def test_isolation_list_reports_the_sandbox():
    res = run("echo")
    assert res.outcome == "ok", res.reason
    assert {"bwrap", "userns", "pidns", "netns", "read-only-system", "audit"} <= set(res.isolation)
    assert "_isolation" not in (res.payload or {})
    assert res.payload["pid"] == 2  # its own pid namespace: bwrap's init is 1


# --- (a) secrets stay in the parent -------------------------------------------------------


def test_parent_os_environ_is_scrubbed(monkeypatch):
    token = "canary-" + secrets.token_hex(16)
    monkeypatch.setenv("KERNELIZE_CANARY", token)
    monkeypatch.setenv("LANG", "C.UTF-8")  # an allowed variable passes through
    res = run("peek_environment")
    assert res.outcome == "ok", res.reason
    assert res.payload is not None
    assert "KERNELIZE_CANARY" not in res.payload["environ"]
    assert res.payload["environ"]["LANG"] == "C.UTF-8"
    assert token in os.environ["KERNELIZE_CANARY"]  # the parent still has it
    assert token not in json.dumps(res.payload)
    assert token not in res.stdout_tail
    assert res.payload["ppid"] == 1  # bwrap's init, in the sandbox's own pid namespace
    assert set(res.payload["environ"]) <= {
        *sandbox.ENV_ALLOW,
        "HOME",
        "TMPDIR",
        "PYTHONHASHSEED",
        "PYTHONDONTWRITEBYTECODE",
        "TRITON_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        "PWD",  # bwrap's --chdir: the working directory
    }


_DRIVER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from runners import sandbox
res = sandbox.run("tests.runners.sandbox_targets:peek_environment", {}, sandbox.Limits(60, 2048),
                  readable=[sys.argv[1] + "/tests"])
print(json.dumps({"outcome": res.outcome, "reason": res.reason, "payload": res.payload,
                  "tail": res.stdout_tail, "isolation": res.isolation}))
"""


def test_parent_proc_environ_is_unreadable():
    """The token is in the parent's *initial* environment, which /proc/<pid>/environ shows: the
    parent is not in the sandbox's /proc, and its parent there (bwrap's init) never had it."""
    token = "canary-" + secrets.token_hex(16)
    env = {**os.environ, "KERNELIZE_CANARY": token}
    driver = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, str(ROOT)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = driver.communicate(timeout=120)
    assert driver.returncode == 0, err
    assert token not in out and token not in err
    got = json.loads(out)
    assert got["outcome"] == "ok", got["reason"]
    payload = got["payload"]
    assert payload["ppid"] == 1  # the parent it can see: bwrap's init, started without the token
    assert "PATH=" in payload["parent_environ"]  # it read that environ: the token is not in it
    assert "PATH=" in payload["self_environ"]  # the probe can read an environ it may read


# --- (b) no network ---------------------------------------------------------------------------


def test_network_connection_is_refused(start_listener):
    listener = start_listener()
    # The listener works: a connection from outside the sandbox is accepted.
    import socket

    with socket.create_connection(("127.0.0.1", listener.port), timeout=3) as s:
        assert s.recv(100).startswith(b"HTTP/1.0 200")
    deadline = time.monotonic() + 3
    while not listener.accepted and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(listener.accepted) == 1

    res = run("connect", {"port": listener.port})
    assert res.outcome == "ok", res.reason
    assert res.payload is not None
    assert res.payload["connected"] is False
    assert "network access is disabled in the sandbox" in res.payload["error"]
    time.sleep(0.3)
    assert len(listener.accepted) == 1  # nothing from the sandbox


# --- (c) timeouts kill the whole process group ----------------------------------------------


def test_timeout_kills_a_hung_target():
    res = run("sleep_forever", timeout_s=1.5)
    assert res.outcome == "timeout"
    assert res.reason == "exceeded the 1.5 s time limit"
    assert res.payload is None
    assert res.returncode == -signal.SIGKILL
    assert 1.5 <= res.wall_s < 6


def test_timeout_kills_grandchildren_too():
    marker, seen = "kz-grandchild-" + secrets.token_hex(8), []
    res = run("spawn_then_sleep", {"marker": marker}, timeout_s=3, follow_up=find_then_return(seen, marker))
    try:
        assert res.outcome == "timeout"
        assert res.wall_s < 8
        assert seen, "the grandchild was never seen running"
        for pid in seen:
            assert _wait_gone(pid), f"grandchild {pid} survived the timeout"
    finally:
        for pid in seen:
            _kill_if_alive(pid)


def test_finished_evaluation_leaves_no_processes_behind():
    marker, seen = "kz-grandchild-" + secrets.token_hex(8), []
    res = run("spawn_then_return", {"marker": marker}, follow_up=find_then_return(seen, marker))
    try:
        assert res.outcome == "ok", res.reason
        assert seen, "the grandchild was never seen running"
        for pid in seen:
            assert _wait_gone(pid, within=2), f"grandchild {pid} still runs after the evaluation ended"
    finally:
        for pid in seen:
            _kill_if_alive(pid)


# --- (d) crashes, (e) errors -------------------------------------------------------------------


def test_abort_is_a_crash_named_sigabrt():
    res = run("abort")
    assert res.outcome == "crashed"
    assert res.reason == "the process died from SIGABRT (aborted)"
    assert res.returncode == -signal.SIGABRT
    assert res.payload is None


def test_segfault_is_a_crash_named_sigsegv():
    res = run("segfault")
    assert res.outcome == "crashed"
    assert "SIGSEGV" in res.reason and "segmentation fault" in res.reason
    assert res.returncode == -signal.SIGSEGV


def test_exit_without_a_result_is_a_crash():
    res = run("exit_early")
    assert res.outcome == "crashed"
    assert res.reason == "the process exited with code 3 before reporting a result"


def test_junk_in_the_result_channel_is_a_crash():
    res = run("corrupt_channel")
    assert res.outcome == "crashed"
    assert "result channel was corrupted" in res.reason
    assert res.payload is None


def test_exception_is_an_error_with_its_message():
    res = run("raises")
    assert res.outcome == "error"
    assert res.reason == "evaluation failed: ValueError: kaboom from the target"
    assert res.returncode == 0


def test_missing_target_is_an_error():
    res = run("no_such_function")
    assert res.outcome == "error"
    assert "AttributeError" in res.reason and "no_such_function" in res.reason


# --- (f) stdout/stderr noise ---------------------------------------------------------------


def test_stdio_junk_does_not_touch_the_payload():
    res = run("noisy")
    assert res.outcome == "ok", res.reason
    assert res.payload == {"answer": 42, "nested": {"list": [1, 2, 3]}}
    for junk in ("JUNK-ON-STDOUT {not json", "JUNK-ON-STDERR", "RAW-FD1-JUNK", "RAW-FD2-JUNK"):
        assert junk in res.stdout_tail


# --- (g) memory ---------------------------------------------------------------------------------


def test_memory_beyond_the_cpu_limit_fails():
    res = run("allocate", {"chunk_mb": 256, "total_mb": 8192}, memory_mb=2048)
    assert res.outcome in ("error", "crashed")
    assert "memory" in res.reason
    assert "2048 MiB" in res.reason


def test_rss_watchdog_kills_when_address_space_is_not_capped():
    # device "cuda" in the request skips RLIMIT_AS (CUDA reserves too much of it):
    # only the RSS watchdog stands between the target and the machine.
    res = run("allocate", {"device": "cuda", "chunk_mb": 64, "total_mb": 4096}, memory_mb=400)
    assert res.outcome == "crashed"
    assert res.reason == "exceeded the 400 MiB memory limit"
    assert res.returncode == -signal.SIGKILL


def test_memory_within_the_limit_is_fine():
    res = run("allocate", {"chunk_mb": 64, "total_mb": 256}, memory_mb=2048)
    assert res.outcome == "ok", res.reason
    assert res.payload == {"held_mb": 256}


# --- (h) working directory --------------------------------------------------------------------


def test_cwd_is_a_fresh_temp_dir_that_is_also_home():
    first, second = run("where_am_i"), run("where_am_i")
    for res in (first, second):
        assert res.outcome == "ok", res.reason
        p = res.payload
        assert p is not None
        assert p["home"] == p["cwd"] == p["tmpdir"]
        assert Path(p["cwd"]).name.startswith("kernelize-sbx-")
        assert p["cwd"] != str(ROOT)
        assert ".request.json" not in p["listing"]  # the request comes over a pipe, never as a file
        assert not Path(p["cwd"]).exists()  # and the folder is gone afterwards
    assert first.payload["cwd"] != second.payload["cwd"]


def test_a_temp_folder_held_in_memory_works_and_the_rest_of_dev_shm_stays_hidden(monkeypatch):
    """TMPDIR under /dev/shm (the engine's files in memory): the sandbox's private /dev/shm must not
    hide the files it is given there, nor show it anything else of the host's /dev/shm."""
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm here")
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="kernelize-test-") as folder:
        other = Path(tempfile.mkstemp(dir="/dev/shm", prefix="kernelize-other-")[1])
        try:
            monkeypatch.setattr(tempfile, "tempdir", folder)
            given = Path(folder) / "inputs.txt"
            given.write_text("the judge's inputs")
            limits = Limits(timeout_s=30, memory_mb=2048)
            request = {"path": str(given)}
            res = sandbox.run(f"{TARGETS}:read_and_list", request, limits, readable=[*TESTS, given])
            assert res.outcome == "ok", res.reason
            assert res.payload["text"] == "the judge's inputs"
            assert res.payload["cwd"].startswith(folder + "/")
            if not sandbox.isolation_problem():  # isolated: only the named file and its own folder
                assert other.name not in res.payload["shm"]
                assert res.payload["shm"] == [Path(folder).name]
        finally:
            other.unlink()


def test_a_generator_target_gets_one_follow_up_from_the_parent():
    """The reference runner's round trip: the child yields, the parent answers once, in the same process."""
    seen = []

    def follow(interim):
        seen.append(interim)
        return {"calls": [1, 2, 3]}

    res = run("two_phase", follow_up=follow)
    assert res.outcome == "ok", res.reason
    assert [s["phase"] for s in seen] == [1]  # the second yield is answered with None, not asked
    assert res.payload["follow"] == {"calls": [1, 2, 3]} and res.payload["again"] is None
    assert res.payload["pid"] == seen[0]["pid"]


def test_without_a_follow_up_a_generator_target_gets_none():
    res = run("two_phase")
    assert res.outcome == "ok" and res.payload["follow"] is None


def test_a_follow_up_that_raises_stops_the_child_instead_of_hanging_it():
    def broken(interim):
        raise RuntimeError("the caller's bug")

    res = run("two_phase", follow_up=broken)
    assert res.outcome == "ok" and res.payload["follow"] is None


# --- (i) started ahead of the request ---------------------------------------------------------


def _start(name: str, module: str = TARGETS) -> sandbox.Started:
    return sandbox.start(f"{module}:{name}", readable=TESTS)


def test_a_sandbox_started_ahead_warms_up_then_runs_its_request():
    with _start("warmed") as started:
        assert started.wait_warm(30), "the warm-up never finished"
        time.sleep(0.5)
        res = started.run({}, Limits(30, 2048))
    assert res.outcome == "ok", res.reason
    assert res.payload["warmed"] == "cpu"
    assert res.payload["seconds_ago"] >= 0.4  # done before the request came
    assert res.wall_s < 5  # timed from the request, not from the start


def test_the_time_limit_counts_from_the_request():
    """A sandbox that waited longer than its limit for its request still gets the whole limit."""
    with _start("echo") as started:
        assert started.wait_warm(30)
        time.sleep(2.5)
        res = started.run({"x": 1}, Limits(2, 2048))
    assert res.outcome == "ok", res.reason
    assert res.payload["request"] == {"x": 1}


def test_a_sandbox_runs_one_request_only():
    started = _start("echo")
    first = started.run({"n": 1}, Limits(30, 2048))
    again = started.run({"n": 2}, Limits(30, 2048))
    assert first.outcome == "ok" and first.payload["request"] == {"n": 1}
    assert again.outcome == "error" and "already used" in again.reason


def test_a_sandbox_closed_unused_leaves_nothing_behind():
    started = _start("echo")
    assert started.wait_warm(30)
    assert started.proc is not None
    pid, workdir = started.proc.pid, started.workdir
    assert Path(workdir).is_dir()
    started.close()
    assert _wait_gone(pid, within=5)
    assert not Path(workdir).exists()
    assert started.run({}, Limits(30, 2048)).outcome == "error"


def test_a_failed_warm_up_is_reported_when_the_request_comes():
    with sandbox.start("tests.runners.broken_warm_up:echo", readable=TESTS) as started:
        res = started.run({"x": 1}, Limits(30, 2048))
    assert res.outcome == "error"
    assert "warm-up failed on cpu" in res.reason


def test_a_started_sandbox_whose_bwrap_is_missing_runs_nothing(monkeypatch):
    monkeypatch.setenv(sandbox.BWRAP_ENV, "/nonexistent/bwrap")
    with _start("echo") as started:
        assert not started.wait_warm(1)
        res = started.run({}, Limits(30, 2048))
    assert res.outcome == "error"
    assert res.reason.startswith(sandbox.ISOLATION_UNAVAILABLE)


def test_without_a_timing_lock_the_child_gets_none(monkeypatch):
    monkeypatch.delenv(sandbox.TIMING_LOCK_ENV, raising=False)
    res = run("try_timing_lock")
    assert res.outcome == "ok", res.reason
    assert res.payload == {"fd": None, "gate": None}


def test_a_timing_lock_shared_elsewhere_excludes_the_child(monkeypatch, tmp_path):
    """Runners sharing a GPU time alone: the child's descriptor of the lock cannot be taken whole
    while another runner holds a share (it is at work), is its own once that one lets go, and the
    lock and its gate are read-only."""
    import fcntl

    lock = tmp_path / "gpu0.lock"
    monkeypatch.setenv(sandbox.TIMING_LOCK_ENV, str(lock))
    with open(lock, "a+b") as held:  # created by the first child otherwise
        fcntl.flock(held, fcntl.LOCK_SH)
        blocked = run("try_timing_lock")
        fcntl.flock(held, fcntl.LOCK_UN)
    free = run("try_timing_lock")
    assert blocked.outcome == free.outcome == "ok", (blocked.reason, free.reason)
    assert blocked.payload["got"] is False
    assert free.payload["got"] is True
    assert free.payload["writable"] is False


def test_a_runner_keeping_the_timing_lock_is_stopped_at_its_limit_and_the_lock_freed(monkeypatch, tmp_path):
    """Candidate code can take the whole lock and keep it: its time limit ends the process, and with
    it the lock, so the runners after it are not held up for longer than that limit."""
    monkeypatch.setenv(sandbox.TIMING_LOCK_ENV, str(tmp_path / "gpu0.lock"))
    hog = run("hog_timing_lock", timeout_s=2)
    assert hog.outcome == "timeout", (hog.outcome, hog.reason)
    after = run("try_timing_lock")
    assert after.outcome == "ok", after.reason
    assert after.payload["got"] is True


def _side_by_side(*calls):
    """Each (target, request) in a sandbox of its own, all at once: their results, in order."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(run, name, request) for name, request in calls]
        results = [f.result() for f in futures]
    for res in results:
        assert res.outcome == "ok", res.reason
    return [res.payload for res in results]


def test_no_runners_work_overlaps_anothers_timed_calls(monkeypatch, tmp_path):
    """One runner at work (its sandbox holds a share from the request on) while another asks to
    time: the timing waits for the work to end, and work asked for meanwhile waits for the timing."""
    monkeypatch.setenv(sandbox.TIMING_LOCK_ENV, str(tmp_path / "gpu0.lock"))
    first, timer, later = _side_by_side(
        ("share_held", {"seconds": 1.5}),
        ("timed_alone", {"before": 0.5, "seconds": 1.0}),
        ("share_held", {"seconds": 0.1}),
    )
    assert timer["asked"] < first["end"], "the timer asked only after the work had ended"
    assert timer["start"] >= first["end"]
    # the third began after the timing, or before the timer asked (then the timer waited for it)
    assert later["start"] >= timer["end"] or later["end"] <= timer["start"]


def test_runners_at_work_that_both_time_take_turns(monkeypatch, tmp_path):
    """Two runners, each holding its share, each asking to time: neither waits for the other's share
    (each lets its own go before the gate), and their timed spans do not overlap."""
    monkeypatch.setenv(sandbox.TIMING_LOCK_ENV, str(tmp_path / "gpu0.lock"))
    one, two = _side_by_side(
        ("timed_alone", {"before": 0.3, "seconds": 0.8}),
        ("timed_alone", {"before": 0.3, "seconds": 0.8}),
    )
    assert one["end"] <= two["start"] or two["end"] <= one["start"], (one, two)


def test_a_runner_waiting_on_its_parent_holds_no_share(monkeypatch, tmp_path):
    """The reference runner yields midway and waits for the judge's follow-up: no share is held
    meanwhile (the judge may be timing another runner first), and the share is taken again after."""
    import fcntl

    lock = tmp_path / "gpu0.lock"
    monkeypatch.setenv(sandbox.TIMING_LOCK_ENV, str(lock))
    probes = []

    def follow(interim):
        other = os.open(lock, os.O_RDONLY)
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while a share is held
            probes.append("whole")
        finally:
            os.close(other)
        return {"go": True}

    res = run("two_phase_holding", follow_up=follow)
    assert res.outcome == "ok", res.reason
    assert probes == ["whole"]
    assert res.payload == {"share_before": True, "share_after": True}


def test_a_runner_asking_to_time_is_not_starved_by_shares_taken_in_turn(tmp_path):
    """Shares taken one after another, always one held: a runner asking for the whole lock gets it
    after the shares held when it asked, not when the others stop (the gate keeps new ones out), and
    no share is held while it has it."""
    import fcntl
    import threading

    path = str(tmp_path / "gpu0.lock")

    def fds():
        return os.open(path, os.O_RDONLY | os.O_CREAT), os.open(path + ".gate", os.O_RDONLY | os.O_CREAT)

    stop = time.monotonic() + 4.0
    held: list[tuple[float, float]] = []

    def worker(delay: float) -> None:
        lock, gate = fds()
        time.sleep(delay)
        while time.monotonic() < stop:
            sandbox._take_share(lock, gate)
            start = time.monotonic()
            time.sleep(0.3)
            held.append((start, time.monotonic()))
            fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)
        os.close(gate)

    workers = [threading.Thread(target=worker, args=(i * 0.1,)) for i in range(3)]
    for w in workers:
        w.start()
    time.sleep(0.5)
    mine = fds()
    asked = time.monotonic()
    with sandbox.gpu_alone(mine):
        start = time.monotonic()
        time.sleep(0.3)
        end = time.monotonic()
    for w in workers:
        w.join()
    assert start - asked < 1.0, f"waited {start - asked:.2f} s for the whole lock"
    assert all(e <= start or s >= end for s, e in held), "a share was held while it timed"


def test_a_timing_lock_that_cannot_be_opened_fails_the_start_with_its_name(monkeypatch, tmp_path):
    monkeypatch.setenv(sandbox.TIMING_LOCK_ENV, str(tmp_path / "missing" / "gpu0.lock"))
    res = run("echo")
    assert res.outcome == "error"
    assert "the timing lock" in res.reason and "gpu0.lock" in res.reason
