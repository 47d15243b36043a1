"""Triton's autotuner in the checks that do not time (runners/tuning.py): each config runs once
under the memory check, and is picked from one timed call in the family above 2^31 elements.

On CPU the autotuner itself cannot run (it asks the GPU's driver for its benchmarker), so these
check the stand-in and that the GPU backend's lookup finds it. That the two runners put it in place
before the candidate is imported is checked in tests/runners/test_memcheck.py.
The last test runs an autotuned kernel under the stand-in, on a GPU (skipped without one).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import triton
import triton.language as tl
import triton.testing

from runners import tuning


@pytest.mark.parametrize(("timed", "runs"), [(False, 1), (True, 2)])
def test_the_stand_in_runs_each_call_once_and_answers_in_do_benchs_shape(timed, runs):
    bench = tuning.benchmarker(timed)
    ran: list[int] = []
    got = bench(lambda: ran.append(1), quantiles=(0.5, 0.2, 0.8))
    assert len(ran) == runs
    assert isinstance(got, list) and len(got) == 3 and len(set(got)) == 1
    assert got[0] >= 0.0
    ran.clear()
    alone = bench(lambda: ran.append(1), warmup=25, rep=100)
    assert isinstance(alone, float) and len(ran) == runs
    if not timed:
        assert got == [0.0, 0.0, 0.0] and alone == 0.0


def test_a_config_that_fails_still_raises_out_of_the_stand_in():
    """The autotuner skips a config whose compile fails by catching what its call raises."""

    def fails() -> None:
        raise triton.runtime.errors.OutOfResources(99999, 65536, "shared memory")

    for timed in (False, True):
        with pytest.raises(triton.runtime.errors.OutOfResources):
            tuning.benchmarker(timed)(fails, quantiles=(0.5, 0.2, 0.8))


def test_install_is_what_the_gpu_backend_hands_the_autotuner(monkeypatch):
    from triton.backends.nvidia.driver import CudaDriver

    monkeypatch.setattr(triton.testing, "do_bench", triton.testing.do_bench)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", triton.testing.do_bench_cudagraph)
    original = CudaDriver.get_benchmarker(None)  # type: ignore[arg-type]
    tuning.install(timed=False)
    installed = CudaDriver.get_benchmarker(None)  # type: ignore[arg-type]
    assert installed is triton.testing.do_bench and installed is not original
    ran: list[int] = []
    assert installed(lambda: ran.append(1), quantiles=(0.5,)) == [0.0] and ran == [1]
    assert triton.testing.do_bench_cudagraph is installed


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(("timed", "runs_per_config"), [(False, 1), (True, 2)])
def test_the_autotuner_runs_each_config_once_under_the_stand_in(monkeypatch, timed, runs_per_config):
    monkeypatch.setattr(triton.testing, "do_bench", triton.testing.do_bench)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", triton.testing.do_bench_cudagraph)
    tuning.install(timed=timed)
    runs: dict[int, int] = {}

    def count(nargs: dict[str, Any]) -> None:
        block = nargs["BLOCK"]
        runs[block] = runs.get(block, 0) + 1

    configs = [triton.Config({"BLOCK": b}, pre_hook=count) for b in (128, 256, 512)]

    @triton.autotune(configs=configs, key=["n"])
    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)

    x = torch.zeros(10_000, device="cuda")
    add_one[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, x.numel())
    torch.cuda.synchronize()
    # Each config ran while tuned, then the chosen one once more for the call itself.
    best = add_one.best_config.kwargs["BLOCK"]
    assert {b: runs[b] - (b == best) for b in runs} == {
        128: runs_per_config,
        256: runs_per_config,
        512: runs_per_config,
    }
    assert torch.equal(x, torch.full_like(x, 1 + 3 * runs_per_config))
