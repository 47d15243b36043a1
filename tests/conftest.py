"""Shared helpers: the CLI as a subprocess, and a TCP listener that counts who called; and the
``slow`` marker put on the heavy tests at collection (the fast tier is ``pytest -m "not slow"``).

Helpers reach tests through fixtures (``cli``, ``start_listener``) so no test
module imports this file by name (but tests/test_test_tiers.py, which checks the tier's lists).
"""

from __future__ import annotations

import contextlib
import fnmatch
import inspect
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
PROBLEMS = TESTS / "problems"
CANDIDATES = TESTS / "candidates"


def run_cli(
    args: list[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> tuple[int, str, str]:
    """``python -m bot.cli ARGS`` from the repository root: (exit code, stdout, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


class Listener:
    """A TCP server on 127.0.0.1 (ephemeral port) that records every connection it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.accepted: list[tuple[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, addr = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted.append(addr)
            with contextlib.suppress(OSError):
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture(scope="session")
def cli() -> Callable[..., tuple[int, str, str]]:
    """``cli(args, env=None, timeout=600) -> (rc, stdout, stderr)``."""
    return run_cli


@pytest.fixture(scope="session")
def start_listener() -> Iterator[Callable[[], Listener]]:
    """``start_listener() -> Listener``; every listener is closed at the end of the session."""
    started: list[Listener] = []

    def start() -> Listener:
        listener = Listener()
        started.append(listener)
        return listener

    yield start
    for listener in started:
        listener.close()


# --- The fast tier: ``pytest -m "not slow"`` ----------------------------------------------------------
#
# ``slow`` (registered in pyproject.toml) is put on tests here, at collection, so that no test file
# has to carry it: a test is slow when it uses one of SLOW_FIXTURES (directly or through another
# fixture), or when SLOW_TESTS names it, its file, or its class. Plain ``pytest`` still runs everything.

# Fixtures that start processes or run the engine end to end, as "defining file::fixture name" (the
# file tells apart fixtures of one name, e.g. a Selenium ``browser`` from an httpx ``browser``).
# Every test using one, now or later, is slow.
SLOW_FIXTURES: dict[str, str] = {
    # Processes, servers and browsers.
    "tests/conftest.py::cli": "`python -m bot.cli` as a subprocess: kernelize run/review/worker",
    "tests/bot/conftest.py::start_worker": "real `celery worker` processes",
    "tests/bot/test_fault_flows.py::redis_world": "web, github and GPU workers as processes",
    "tests/bot/test_fault_flows.py::defaults_world": "`kernelize serve` as a process",
    "tests/bot/test_faults.py::private_redis": "a Redis server of its own, stopped and started again",
    "tests/bot/test_faults.py::private_postgres": "a PostgreSQL server of its own, stopped and started",
    "tests/bot/test_local_review.py::readme_run": "`kernelize review` of the README's example",
    "tests/bot/test_setup.py::browser": "Chromium through ChromeDriver",
    "tests/bot/test_dashboard_browser.py::browser": "Chromium through ChromeDriver",
    "tests/e2e/test_github_flow.py::world": "web and workers as processes",
    "tests/runners/test_supervisor.py::supervised": "supervised Celery workers as processes",
    # The engine end to end: candidates in their sandboxes, under Triton's interpreter on the CPU.
    "tests/runners/test_judge.py::timed": "the engine on the timing candidates, timed on the CPU",
    "tests/runners/test_judge.py::timed_norm": "the engine on RMSNorm's timing candidates, on the CPU",
    "tests/runners/test_judge.py::training_judge": "a reference timed in training, then a run per test",
    "tests/runners/test_memcheck.py::judge": "a sandboxed reference, then runs under a stand-in checker",
    "tests/runners/test_normalize.py::run_results": "each normalized sample run under the interpreter",
    "tests/runners/test_template.py::gradients": "each generated backward under Triton's interpreter",
    "tests/runners/test_template.py::compiled": "torch.compile(fullgraph) over each generated module",
    "tests/runners/test_inductor.py::reports": "the engine on captured Inductor kernels",
    "tests/runners/test_inductor.py::gpu_reports": "the engine on captured Inductor kernels, on a GPU",
    "tests/runners/test_gpu.py::reports": "the engine on real problems, on a GPU",
    "tests/runners/test_gpu.py::timed_cheats": "the engine on timing cheats, on a GPU",
    "tests/runners/test_gpu.py::trained": "the engine with training timing, on a GPU",
    "tests/runners/test_gpu.py::memory_checked": "the engine under the memory checker, on a GPU",
}

# Slow tests that no fixture above gives away, as "file", "file::test" or "file::Class" (each covers
# every parametrization; the test's name may hold fnmatch wildcards). tests/test_test_tiers.py checks
# that each names something that exists.
SLOW_TESTS: list[str] = [
    # Every test here starts the web app and workers as processes.
    "tests/e2e/test_github_flow.py",
    # The engine in its sandboxes behind the webhook (eager Celery): kernelize run on the pull request.
    "tests/bot/test_command_flow.py::test_a_new_push_marks_the_earlier_suggestions_outdated",
    "tests/bot/test_command_flow.py::test_a_maintainer_runs_one_target_with_options",
    "tests/bot/test_applying.py::test_apply_commits_the_verified_code_once_and_it_stays_applied",
    "tests/bot/test_applying.py::test_a_repository_requiring_compile_gets_nothing_it_could_not_show_beats_compile",
    "tests/bot/test_applying.py::test_code_shown_only_in_the_summary_is_committed_too",
    "tests/bot/test_tracking.py",  # every test runs a pull request through the engine first
    # `kernelize serve` and `kernelize worker` as processes.
    "tests/bot/test_web.py::test_serve_*",
    "tests/runners/test_supervisor.py::test_kernelize_worker_gpus_runs_the_engine_task",
    "tests/runners/test_supervisor.py::test_a_host_that_cannot_isolate_starts_no_worker",
    # bench/kernel_quality.py end to end.
    "tests/test_bench_problems.py::test_script_on_cpu_writes_the_table",
    # The engine on real problems and candidates, in sandboxes, under Triton's interpreter.
    "tests/runners/test_together.py::test_a_suggestion_that_breaks_once_both_are_applied_is_not_suggested",
    "tests/runners/test_together.py::test_two_suggestions_that_compose_are_both_suggested",
    "tests/runners/test_judge.py::test_a_candidate_with_an_honest_backward_gets_training_figures",
    "tests/runners/test_memcheck.py::test_the_family_runs_the_original_once_and_compares_each_candidate",
    "tests/runners/test_memcheck.py::test_above_2_31_the_original_is_allowed_its_own_error_and_nothing_more",
    "tests/runners/test_normalize.py::test_run_harness_notices_a_wrong_kernel",
    # Generated kernels run under the interpreter (each generation traces in a sandbox of its own).
    "tests/runners/test_template.py::test_generating_twice_gives_the_same_code",
    "tests/runners/test_template.py::test_pointwise_launch_is_autotuned_on_cuda_and_plain_in_the_interpreter",
    "tests/runners/test_template.py::test_row_launch_is_autotuned_over_warps_on_cuda",
    "tests/runners/test_template.py::test_short_rows_launch_several_rows_a_program_tuned_on_cuda",
    "tests/runners/test_template_attention.py::test_every_autotuned_config_compiles_for_an_h100_without_heavy_spills",
    "tests/runners/test_template_sdpa.py::test_every_autotuned_config_compiles_for_an_h100_without_heavy_spills",
    "tests/runners/test_template_windows.py::test_every_autotuned_config_compiles_for_an_h100_without_spills_or_64_bit_divisions",
    "tests/runners/test_template_sdpa.py::test_forward_refuses_what_the_kernel_does_not_take",
    "tests/runners/test_gemm_template.py::test_the_tiles_float32_tries_spill_little_and_those_it_skips_spill_hundreds",
    "tests/runners/test_gemm_template.py::test_a_second_operand_whose_size_does_not_match_is_refused_*",
    "tests/runners/test_template.py::test_split_halves_are_read_from_one_input",
    "tests/runners/test_template.py::test_a_module_larger_than_the_trace_sandbox_is_traced_on_the_meta_device",
    "tests/runners/test_template.py::test_a_module_that_reads_values_is_traced_on_real_tensors",
    "tests/runners/test_gemm_template.py::test_generated_module_matches_the_original_at_odd_sizes",
    "tests/runners/test_gemm_template.py::test_template_generator_gives_the_gemm_candidate",
    "tests/runners/test_gemm_template.py::test_transformers_conv1d_is_a_product_with_its_weight_read_as_it_lies",
    "tests/runners/test_outer_template.py::test_generated_module_matches_the_original",
    "tests/runners/test_outer_template.py::test_what_a_table_cannot_hold_is_declined_by_name",
    # Each in a fresh Python under the interpreter (~3 s a case); one of each kind stays in the fast tier.
    "tests/runners/test_template_reductions.py::test_logsumexp_of_infinite_rows_is_torchs",
    "tests/runners/test_template_reductions.py::test_logsumexp_keepdim_and_dim_read_from_the_module",
    "tests/runners/test_template_reductions.py::test_losses_over_every_element_match_torch",
    "tests/runners/test_template_reductions.py::test_kl_div_of_given_distributions_matches_torch",
    "tests/runners/test_template_reductions.py::test_batch_norm_in_eval_mode_matches_torch",
    "tests/runners/test_template_reductions.py::test_column_spellings_match_torch",
    "tests/runners/test_template_group_norm.py::test_group_norm_spellings_match_torch",
    "tests/runners/test_template_indices.py::test_cross_entropy_reductions_match_torch",
    "tests/runners/test_template_indices.py::test_masked_mean_pooling_spellings_match_torch",
    "tests/runners/test_template_masks.py::test_a_padding_mask_and_a_per_head_parameter_match_torch",
    "tests/runners/test_template_short_rows.py::test_short_rows_match_torch_at_every_tile",
    # Sandboxes left to run into their time or memory limits, or to fork until stopped.
    "tests/runners/test_sandbox.py::test_timeout_kills_a_hung_target",
    "tests/runners/test_sandbox.py::test_timeout_kills_grandchildren_too",
    "tests/runners/test_sandbox.py::test_the_time_limit_counts_from_the_request",
    "tests/runners/test_sandbox.py::test_memory_beyond_the_cpu_limit_fails",
    "tests/runners/test_isolation.py::test_daemons_die_with_the_evaluation",
    "tests/runners/test_isolation.py::test_a_fork_bomb_is_contained",
    # Many parses on many threads, to shake out races.
    "tests/runners/test_pyast.py::test_parses_concurrently_without_spurious_errors",
]


def _fixture_key(fixturedef: Any) -> str:
    try:
        source = Path(inspect.getsourcefile(fixturedef.func) or "")
        where = source.resolve().relative_to(ROOT).as_posix()
    except (TypeError, ValueError):
        return ""
    return f"{where}::{fixturedef.argname}"


def _is_slow(item: pytest.Item) -> bool:
    base = item.nodeid.split("[", 1)[0]
    if any(base == p or base.startswith(f"{p}::") or fnmatch.fnmatchcase(base, p) for p in SLOW_TESTS):
        return True
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        _fixture_key(d) in SLOW_FIXTURES
        for name in item.fixturenames
        for d in info.name2fixturedefs.get(name, ())
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)
