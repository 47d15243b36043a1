"""bench/compile_modes.py on a machine without a GPU: every problem file names one module class,
rows render from saved runs (failed modes as cells), and the measuring run refuses clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.bench_scripts import script

ROOT = Path(__file__).resolve().parent.parent


cm = script("compile_modes")


@pytest.mark.parametrize("path", sorted((ROOT / "bench" / "problems").glob("*.py")), ids=lambda p: p.stem)
def test_each_problem_file_names_one_module_class(path):
    assert issubclass(cm.module_class(cm.load(path)), torch.nn.Module)


def test_rows_render_from_saved_runs_with_ratios_and_failures(tmp_path, capsys):
    rows = [
        {
            "problem": "conv_bias_relu",
            "level": 2,
            "modes": {
                "eager": {"ms": 2.0, "first_call_s": 0.1},
                "static": {"ms": 1.0, "first_call_s": 21.0},
                "dynamic": {"error": "RuntimeError: no"},
            },
        },
        {"problem": "gelu", "level": 1, "modes": {"eager": {"ms": 0.5, "first_call_s": 0.0}}},
    ]
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps({"rows": rows}))
    out = tmp_path / "modes.md"
    assert (
        cm.main(["--from-json", str(saved), "--modes", "eager,static,dynamic", "--markdown", str(out)]) == 0
    )
    text = out.read_text()
    lines = text.splitlines()
    assert lines[2].startswith("| gelu | 1 | 0.5 ms (0 s) | not run | not run |")  # level 1 first
    assert "| conv_bias_relu | 2 | 2 ms (0 s) | 1 ms, 2.00x (21 s) | failed (RuntimeError: no) |" in text
    assert capsys.readouterr().out.strip() == text.strip()


def test_an_unknown_mode_is_refused_with_the_known_ones(capsys):
    with pytest.raises(SystemExit):
        cm.main(["--modes", "eager,fastest"])
    assert "unknown mode(s) fastest; known: eager, static" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
def test_without_a_gpu_it_says_so_and_exits_2(capsys):
    assert cm.main(["--only", "gelu"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_timing_takes_the_lock_the_engines_runners_share(tmp_path, monkeypatch):
    """Beside the engine on one GPU, its timed calls never overlap a runner's (nor the reverse)."""
    import fcntl
    import os

    lock = tmp_path / "timing.lock"
    monkeypatch.setenv("KERNELIZE_TIMING_LOCK", str(lock))
    other = os.open(lock, os.O_RDONLY | os.O_CREAT)
    try:
        with cm._timing_lock(), pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released after
    finally:
        os.close(other)
