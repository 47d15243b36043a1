"""Escape attempts against runners.sandbox, each observed from outside the sandbox.

Hostile targets are in escape_targets.py. Every test checks what it can see from here: the
file that was not written, the process that no longer runs, the listener that accepted nothing,
the canary that is in nothing the sandbox returned. The second half refuses the isolation
(bwrap that fails, a namespace without the rights) and checks that nothing ran.
"""

from __future__ import annotations

import json
import os
import secrets
import site
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import pytest

from runners import sandbox
from runners.sandbox import Limits
from tests.runners.test_sandbox import _alive, _kill_if_alive, _wait_gone, find_then_return, host_pids_with

ROOT = Path(__file__).resolve().parents[2]
TARGETS = "tests.runners.escape_targets"
TESTS = ROOT / "tests"


def run(
    name: str, request: dict, *, limits: Limits | None = None, readable=(), **kw
) -> sandbox.SandboxResult:
    return sandbox.run(
        f"{TARGETS}:{name}", request, limits or Limits(30, 2048), readable=[TESTS, *readable], **kw
    )


def returned(res: sandbox.SandboxResult) -> str:
    """Everything the sandbox handed back, as one string."""
    return json.dumps(res.payload) + res.reason + res.stdout_tail + res.blob.decode("latin-1")


@pytest.fixture
def problem(tmp_path: Path) -> Path:
    """A problem's repository, readable by the sandbox: a module, its bytecode folder, a .env."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "model.py").write_text("import torch\n")
    return repo


# --- files outside the private tmp --------------------------------------------------------------


def test_nothing_outside_the_working_directory_is_writable(tmp_path: Path, problem: Path) -> None:
    token = secrets.token_hex(8)
    site_packages = Path(site.getsitepackages()[0])
    outside = [
        ROOT / "runners" / f"evil-{token}.pth",  # the project's own package, on every sandbox's path
        site_packages / f"evil-{token}.pth",  # would run in every later interpreter
        Path(sysconfig.get_paths()["stdlib"]) / f"evil_{token}.py",
        ROOT / f"evil-{token}.py",  # the project's root (not even visible)
        tmp_path / f"beside-{token}.txt",  # beside its working directory
        Path(tempfile.gettempdir()) / f"kernelize-evil-{token}",  # the host's /tmp
        problem / "pkg" / f"planted-{token}.py",  # the problem's repository (readable)
        Path(os.path.expanduser("~")) / f".evil-{token}",  # a home directory
    ]
    shm = Path("/dev/shm") / f"evil-{token}"  # the host's: the sandbox has a private one
    res = run("write_everywhere", {"paths": [str(p) for p in [*outside, shm]]}, readable=[problem])
    assert res.outcome == "ok", res.reason
    done = res.payload["done"]
    assert list(done.values())[-1] == "written"  # its own working directory is writable
    for path in outside:
        assert done[str(path)] != "written", f"{path}: the sandbox says it wrote it"
        assert not path.exists(), f"{path} was written from inside the sandbox"
    assert not shm.exists()


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_host_kernels_settings_are_read_only(device: str) -> None:
    """Sysctls (kernel.core_pattern runs a program as the host's root on the next crash), sysrq,
    IRQ settings, /sys: written with the value they hold, so a failed containment changes nothing."""
    candidates = [
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/kernel/randomize_va_space",
        "/proc/sys/vm/overcommit_memory",
        "/proc/sysrq-trigger",
        "/proc/irq/default_smp_affinity",
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "/sys/devices/system/cpu/smt/control",
    ]
    before = {p: Path(p).read_text() for p in candidates if os.path.isfile(p) and "sysrq" not in p}
    res = run("write_kernel_settings", {"paths": candidates, "device": device})
    assert res.outcome == "ok", res.reason
    for path, what in res.payload["done"].items():
        assert what != "written", f"{path} was written from inside the sandbox"
        if os.path.exists(path):  # read-only, or not in the sandbox at all
            assert any(w in what for w in ("Read-only file system", "Permission denied", "No such file")), (
                what
            )
    assert {p: Path(p).read_text() for p in before} == before


def test_no_bytecode_is_planted_next_to_the_problem_file(problem: Path) -> None:
    tag = sys.implementation.cache_tag
    pyc = problem / "pkg" / "__pycache__" / f"model.{tag}.pyc"
    res = run("write_everywhere", {"paths": [str(pyc)]}, readable=[problem])
    assert res.outcome == "ok", res.reason
    assert "Read-only file system" in res.payload["done"][str(pyc)]
    assert not (problem / "pkg" / "__pycache__").exists()


def test_compiler_caches_are_private_to_each_runner() -> None:
    caches = []
    for _ in range(2):
        res = sandbox.run(
            "tests.runners.sandbox_targets:peek_environment", {}, Limits(30, 1024), readable=[TESTS]
        )
        assert res.outcome == "ok", res.reason
        env = res.payload["environ"]
        for var in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
            assert env[var].startswith(env["HOME"] + "/")  # inside its own working directory
        assert not Path(env["HOME"]).exists()  # gone with the runner
        caches.append(env["TRITON_CACHE_DIR"])
    assert caches[0] != caches[1]


# --- processes that outlive the evaluation --------------------------------------------------------


@pytest.mark.parametrize("hang", [False, True], ids=["finishes", "times out"])
def test_daemons_die_with_the_evaluation(hang: bool) -> None:
    marker, seen = "kz-daemon-" + secrets.token_hex(8), []
    res = run(
        "daemonize",
        {"marker": marker, "hang": hang},
        limits=Limits(timeout_s=4, memory_mb=2048),
        follow_up=find_then_return(seen, marker),
    )
    try:
        assert res.outcome == ("timeout" if hang else "ok"), res.reason
        time.sleep(0.5)  # the follow-up saw the first; let the others be counted too
        assert seen, "the daemons were never seen running"
        for pid in seen:
            assert _wait_gone(pid, within=2), f"daemon {pid} outlived its sandbox"
        assert host_pids_with(marker) == []
    finally:
        for pid in host_pids_with(marker):
            _kill_if_alive(pid)


def test_a_runner_cannot_reach_the_one_started_ahead_of_the_next_candidate() -> None:
    """The next candidate's runner waits, warmed, while this one runs: it must stay out of reach
    (another pid namespace, another working directory) and then run its own request untouched."""
    assert sandbox.isolating()
    with sandbox.start("tests.runners.sandbox_targets:where_am_i", readable=[TESTS]) as neighbour:
        assert neighbour.wait_warm(30)
        assert neighbour.proc is not None
        pid, workdir = neighbour.proc.pid, neighbour.workdir
        res = run("reach_neighbours", {"paths": [workdir, tempfile.gettempdir()], "groups": [pid]})
        assert res.outcome == "ok", res.reason
        p = res.payload
        assert pid not in p["seen"]  # its own pid namespace shows only its own processes
        assert -pid not in p["killed"]
        assert p["written"][workdir].startswith(("FileNotFoundError", "PermissionError", "OSError"))
        assert _alive(pid)
        assert not (Path(workdir) / "planted.py").exists()
        after = neighbour.run({}, Limits(30, 2048))
    assert after.outcome == "ok", after.reason
    assert after.payload["cwd"] == workdir
    assert "planted.py" not in after.payload["listing"]


# --- secrets ----------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["returned", "raised"])
def test_no_secret_reaches_anything_returned(
    how: str, tmp_path: Path, problem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "canary-" + secrets.token_hex(16)
    monkeypatch.setenv("KERNELIZE_GITHUB_PRIVATE_KEY", token)  # the parent's environment
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the sandbox's folder lands in tmp_path
    (tmp_path / ".env").write_text(f"KERNELIZE_WEBHOOK_SECRET={token}\n")  # beside its working dir
    (tmp_path / "id_rsa").write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{token}\n")
    (problem / ".env").write_text(f"TOKEN={token}\n")  # in the readable repository: hidden
    (problem / "deploy.pem").write_text(f"{token}\n")
    files = [str(tmp_path / ".env"), str(problem / ".env"), str(problem / "deploy.pem"), "/proc/1/environ"]
    res = run("steal_secrets", {"files": files, "raise": how == "raised"}, readable=[problem])
    assert res.outcome == ("error" if how == "raised" else "ok"), res.reason
    assert token not in returned(res)
    if how == "returned":
        loot = res.payload["loot"]
        assert "No such file or directory" in loot[str(tmp_path / ".env")]
        for hidden in (problem / ".env", problem / "deploy.pem"):  # /dev/null in their place
            assert loot[str(hidden)].startswith("PermissionError"), loot[str(hidden)]
        assert any(k.startswith("/proc/") for k in loot)  # it did read the environs it could see
    assert len(res.reason) <= sandbox.REASON_CHARS
    assert len(res.stdout_tail) <= sandbox.STDIO_TAIL_BYTES


def test_the_parent_and_its_ancestors_are_not_in_the_sandboxs_proc() -> None:
    """A canary in the *initial* environment of the process that starts the sandbox (what
    ``/proc/<pid>/environ`` shows) and of its parent."""
    token = "canary-" + secrets.token_hex(16)
    driver = (
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from runners import sandbox\n"
        "res = sandbox.run('tests.runners.escape_targets:steal_secrets', {}, sandbox.Limits(60, 2048),\n"
        "                  readable=[sys.argv[1] + '/tests'])\n"
        "print(json.dumps({'outcome': res.outcome, 'reason': res.reason, 'payload': res.payload,\n"
        "                  'tail': res.stdout_tail}))\n"
    )
    env = {**os.environ, "KERNELIZE_CANARY": token}
    # The grandparent holds the canary too: sh -c keeps its initial environment.
    out = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -c "$0" "$1"', driver, str(ROOT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["outcome"] == "ok", got["reason"]
    assert token not in out.stdout and token not in out.stderr
    visible = [k for k in got["payload"]["loot"] if k.startswith("/proc/")]
    assert len(visible) <= 4  # bwrap's init, the target, ... and nothing of the host


# --- network -------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["connect_socket", "connect_ctypes", "connect_spawned"])
def test_no_connection_reaches_the_host(how: str, start_listener) -> None:
    listener = start_listener()
    import socket

    with socket.create_connection(("127.0.0.1", listener.port), timeout=3):
        pass  # the listener works from outside
    deadline = time.monotonic() + 3
    while not listener.accepted and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(listener.accepted) == 1
    res = run(how, {"port": listener.port})
    assert res.outcome == "ok", res.reason
    assert res.payload["connected"] is False, res.payload
    time.sleep(0.3)
    assert len(listener.accepted) == 1  # nothing from the sandbox


# --- resources ---------------------------------------------------------------------------------


def test_a_fork_bomb_is_contained() -> None:
    marker = "kz-forkbomb-" + secrets.token_hex(8)
    try:
        res = run("fork_bomb", {"marker": marker, "most": 5000}, limits=Limits(60, 4096, processes=64))
        if res.outcome == "ok":  # RLIMIT_NPROC stopped it (a host user other than root)
            assert res.payload["forked"] < 64 and "Resource temporarily unavailable" in res.payload["error"]
        else:  # the watchdog counted the sandbox's tasks
            assert res.outcome == "crashed", res.reason
            assert res.reason == "exceeded the limit of 64 processes and threads"
        assert res.wall_s < 30
        deadline = time.monotonic() + 5
        while host_pids_with(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert host_pids_with(marker) == []
        # The host is fine: it starts a process.
        assert subprocess.run(["true"], timeout=10).returncode == 0
    finally:
        for pid in host_pids_with(marker):
            _kill_if_alive(pid)


def test_memory_spread_over_processes_is_counted_together() -> None:
    res = run("memory_hog", {"total_mb": 800, "processes": 4}, limits=Limits(60, 400))
    assert res.outcome == "crashed"
    assert res.reason == "exceeded the 400 MiB memory limit"


def test_a_memory_hog_on_cpu_is_stopped() -> None:
    res = sandbox.run(
        "tests.runners.sandbox_targets:allocate",
        {"chunk_mb": 256, "total_mb": 8192},
        Limits(60, 1024),
        readable=[TESTS],
    )
    assert res.outcome in ("error", "crashed")
    assert "1024 MiB memory limit" in res.reason


def test_a_file_over_the_size_limit_is_refused() -> None:
    res = run("write_everywhere", {"paths": []}, limits=Limits(30, 1024, file_mb=0))
    assert res.outcome == "ok", res.reason  # Python ignores SIGXFSZ: the write fails instead
    assert list(res.payload["done"].values()) == ["OSError: [Errno 27] File too large"]


# --- isolation refused: nothing runs --------------------------------------------------------------


def _side_effect(tmp_path: Path) -> tuple[Path, sandbox.SandboxResult]:
    mark = tmp_path / "it-ran"
    return mark, run("side_effect", {"path": str(mark)})


def test_side_effect_target_runs_when_the_sandbox_is_off(tmp_path: Path, monkeypatch) -> None:
    """The control: unsandboxed, the same target leaves its mark."""
    monkeypatch.setattr(sandbox, "_isolate", False)
    mark, res = _side_effect(tmp_path)
    assert res.outcome == "ok", res.reason
    assert mark.read_text() == "it ran\n"
    assert res.isolation == ["none", "audit"]


@pytest.mark.parametrize(
    ("bwrap", "why"),
    [
        ("/bin/false", "isolation unavailable: false exited with code 1 before the sandbox started"),
        ("/nonexistent/bwrap", "isolation unavailable: /nonexistent/bwrap not found (install bubblewrap)"),
    ],
)
def test_a_failing_bwrap_runs_nothing(bwrap: str, why: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(sandbox.BWRAP_ENV, bwrap)
    mark, res = _side_effect(tmp_path)
    assert res.outcome == "error"
    assert res.reason == why
    assert res.payload is None
    assert not mark.exists()
    assert sandbox.isolation_problem() == why
    assert sandbox.refusal() == why


_REFUSED_DRIVER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from runners import sandbox
res = sandbox.run("tests.runners.escape_targets:side_effect", {"path": sys.argv[2]},
                  sandbox.Limits(60, 2048), readable=[sys.argv[1] + "/tests"])
print(json.dumps({"outcome": res.outcome, "reason": res.reason, "payload": res.payload,
                  "problem": sandbox.isolation_problem()}))
"""


def test_where_user_namespaces_are_refused_nothing_runs(tmp_path: Path) -> None:
    """The worker itself runs in a namespace that may create no user namespace (a container
    without the rights, Ubuntu's restricted user namespaces): a real refusal, from the kernel."""
    mark = tmp_path / "it-ran"
    outer = [
        sandbox.bwrap_executable(),
        *("--unshare-user", "--disable-userns", "--dev-bind", "/", "/", "--die-with-parent"),
        "--",
    ]
    out = subprocess.run(
        [*outer, sys.executable, "-c", _REFUSED_DRIVER, str(ROOT), str(mark)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["outcome"] == "error" and got["payload"] is None
    assert got["reason"].startswith("isolation unavailable: bwrap: "), got["reason"]
    assert "\n" not in got["reason"]
    assert got["problem"].startswith("isolation unavailable: bwrap: ")
    assert not mark.exists()


def test_a_switched_off_sandbox_is_refused_by_workers(monkeypatch) -> None:
    monkeypatch.setattr(sandbox, "_isolate", False)
    assert sandbox.refusal() == "isolation unavailable: the sandbox is switched off in this process"


def test_the_probe_passes_here() -> None:
    assert sandbox.isolation_problem() == ""
    assert _alive(os.getpid())


def test_a_gpu_task_on_a_host_that_cannot_isolate_is_refused(tmp_path: Path, monkeypatch) -> None:
    """The task a GPU worker runs: the pull request's module never runs, the report says why (the
    check run shows it as the module's reason)."""
    from runners import tasks
    from runners.bundle import pack
    from runners.messages import GpuRequest

    mark = tmp_path / "it-ran"
    source = (
        f"import pathlib\npathlib.Path({str(mark)!r}).write_text('it ran')\n"
        "import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    )
    monkeypatch.setenv(sandbox.BWRAP_ENV, "/bin/false")
    bundle = pack({"m.py": source})
    request = GpuRequest(bundle=bundle, rel_path="m.py", class_names=["M"], device="cpu")
    [module] = tasks.kernelize_module(request.to_dict())["modules"]
    assert module["status"] == "skipped"
    assert module["reason"] == (
        "isolation unavailable: false exited with code 1 before the sandbox started; "
        "this GPU worker runs no code from pull requests without its sandbox (docs/self-hosting.md)"
    )
    assert not mark.exists()


def test_a_repository_above_the_temp_folder_is_not_bound_whole(tmp_path: Path, monkeypatch) -> None:
    """``kernelize run`` from a folder that holds the temp folder: the judge's files (the reference's
    outputs) and the other sandboxes stay out of reach; the problem file itself is readable."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    judge = tmp_path / "tmp" / "kernelize-judge-x"
    judge.mkdir()
    (judge / "reference.bin").write_text("the answers")
    (tmp_path / "model.py").write_text("# the module\n")
    files = [str(judge / "reference.bin"), str(tmp_path / "model.py")]
    res = run(
        "steal_secrets",
        {"files": files},
        readable=sandbox.problem_paths(str(tmp_path / "model.py"), str(tmp_path)),
    )
    assert res.outcome == "ok", res.reason
    loot = res.payload["loot"]
    assert loot[str(tmp_path / "model.py")] == "# the module\n"
    assert "No such file or directory" in loot[str(judge / "reference.bin")]
