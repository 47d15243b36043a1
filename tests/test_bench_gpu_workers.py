"""bench/gpu_workers.py: the figures from what was sent, returned and logged, and one real run on
the CPU (two supervised workers, "GPUs" 0 and 1, the embedded broker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench_scripts import script

ROOT = Path(__file__).resolve().parent.parent


gw = script("gpu_workers")


def _finished(task_id: str, gpu: str, seconds: float = 1.0) -> dict[str, object]:
    return {"msg": "task finished", "task_id": task_id, "gpu": gpu, "seconds": seconds, "outcome": "success"}


def test_a_task_logged_twice_or_never_is_reported_and_fails_the_run() -> None:
    result = {"modules": [{"status": "ok", "best": "k"}]}
    sampled = gw.Sampled(
        utilisation={"0": [10.0, 90.0], "1": [50.0]},
        health=[
            {"workers": [{"gpu": "0", "up": True}]},
            {"workers": [{"gpu": "0", "up": True}, {"gpu": "1", "up": True}]},
        ],
        metrics_tasks={"success": 3.0},
    )
    finished = [_finished("a", "0"), _finished("b", "1", 3.0), _finished("a", "0"), _finished("other", "1")]
    out = gw.summarize(
        ["0", "1"],
        ["a", "b", "c"],
        {"a": result, "b": result, "c": "TimeoutError: late"},
        finished,
        sampled,
        30.0,
    )
    assert out.ran_on == {"0": 2, "1": 1}  # a task of another run ("other") is not counted
    assert (out.ran_twice, out.never_ran, out.failed) == (["a"], ["c"], ["c: TimeoutError: late"])
    assert out.tasks_per_minute == 6.0 and out.statuses == {"ok": 2} and out.best == {"k": 2}
    assert out.busiest == {"0": 90.0, "1": 50.0} and out.mean_busy == {"0": 50.0, "1": 50.0}
    assert out.workers_up == ["0", "1"] and out.task_seconds == {"0": 1.0, "1": 3.0}
    assert not out.ok
    clean = gw.summarize(["0", "1"], ["a", "b"], {"a": result, "b": result}, finished[:2], sampled, 30.0)
    assert clean.ok
    one_down = gw.Sampled(health=[{"workers": [{"gpu": "0", "up": True}, {"gpu": "1", "up": False}]}])
    assert not gw.summarize(
        ["0", "1"], ["a", "b"], {"a": result, "b": result}, finished[:2], one_down, 30.0
    ).ok


def test_metrics_and_log_lines_are_read() -> None:
    text = "\n".join(
        [
            "# HELP kernelize_task_seconds Task run time",
            'kernelize_task_seconds_count{outcome="success",task="kernelize.kernelize_module"} 3.0',
            'kernelize_task_seconds_count{outcome="failure",task="kernelize.kernelize_module"} 1.0',
            'kernelize_task_seconds_count{outcome="success",task="kernelize.kernelize_file"} 2.0',
            'kernelize_task_seconds_sum{outcome="success",task="kernelize.kernelize_module"} 9.5',
        ]
    )
    assert gw.metrics_task_counts(text) == {"success": 5.0, "failure": 1.0}
    log = "\n".join(
        ["celery starting", json.dumps(_finished("a", "1")), json.dumps({"msg": "other"}), "{bad"]
    )
    assert gw.finished_lines(log) == [_finished("a", "1")]


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--gpus", "0,0"], ["--gpus", "x"], ["--gpus", "0", "--tasks", "0"]):
        with pytest.raises(SystemExit) as exc:
            gw.parse_args(argv)
        assert exc.value.code == 2
    assert "listed twice" in capsys.readouterr().err


@pytest.mark.slow
def test_two_supervised_workers_share_the_tasks_each_run_once(tmp_path: Path) -> None:
    """The real thing on the CPU: ``kernelize worker --gpus 0,1`` on the embedded broker, four
    tasks of the small RMSNorm through the template generator, every one verified and run once."""
    out = tmp_path / "workers.json"
    argv = [
        "--gpus",
        "0,1",
        "--tasks",
        "4",
        "--small",
        "--device",
        "cpu",
        "--timeout",
        "400",
        "--json",
        str(out),
    ]
    assert gw.main(argv) == 0
    [run] = json.loads(out.read_text())
    assert run["gpus"] == ["0", "1"] and run["workers_up"] == ["0", "1"]
    assert sum(run["ran_on"].values()) == 4 and all(n > 0 for n in run["ran_on"].values())
    assert run["ran_twice"] == [] and run["never_ran"] == [] and run["failed"] == []
    assert run["statuses"] == {"ok": 4} and run["best"] == {"rms_norm_fwd_kernel": 4}
    assert run["metrics_tasks"] == {"success": 4.0}
