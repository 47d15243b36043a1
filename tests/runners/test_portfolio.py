"""The default portfolio and the per-generator account of who won and why the others lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from runners.generators import default_portfolio
from runners.generators.inductor import NEEDS_CUDA
from runners.results import CandidateResult, ModuleReport, Status, Timing, Verdict, generator_outcomes


def test_cpu_portfolio_is_template_with_the_others_explained() -> None:
    names, unavailable = default_portfolio("cpu")
    assert names == ["template"]
    assert unavailable["inductor"] == NEEDS_CUDA.removeprefix("inductor: ")
    assert "CPU" in unavailable["kernelllm"] or "transformers" in unavailable["kernelllm"]


def test_gpu_portfolio_without_weights_names_the_missing_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("transformers")
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    names, unavailable = default_portfolio("cuda")
    assert names == ["inductor", "template"]
    assert unavailable == {
        "kernelllm": "no weights for facebook/KernelLLM on this machine "
        "(download them once, or point --model at a folder)"
    }


def test_gpu_portfolio_with_a_local_model_folder_asks_every_generator(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    names, unavailable = default_portfolio("cuda", {"model": str(tmp_path)})
    assert (names, unavailable) == (["kernelllm", "inductor", "template"], {})


def _timing(ms: float) -> Timing:
    return Timing(ms, ms * 0.98, ms * 1.02, 30)


def _correct(cid: str, gen: str, ms: float, eager_ms: float = 2.0, faster: bool = True) -> CandidateResult:
    c = CandidateResult(cid, gen, Status.CORRECT, median_ms=ms, speedup_vs_eager=eager_ms / ms)
    c.speedup_vs_compile = 1.5 / ms
    c.verdict = Verdict.FASTER if faster else Verdict.NO_FASTER
    c.timings = {"candidate": _timing(ms), "eager": _timing(eager_ms)}
    return c


def test_outcomes_on_a_gpu_say_who_won_and_why_each_other_lost() -> None:
    m = ModuleReport("m.py::Norm", "m.py", "Norm")
    m.candidates = [
        CandidateResult("kernelllm", "kernelllm", Status.ERROR, "generator: CUDA out of memory"),
        _correct("inductor-0", "inductor", 1.0),
        _correct("rms_norm_fwd_kernel", "template", 0.5),
        CandidateResult("openai-0", "openai", Status.INCORRECT, "check 2: max abs error 3.1"),
        CandidateResult("openai-1", "openai", Status.REJECTED, "check 6: caches its result"),
        CandidateResult("openai-2", "openai", Status.INCORRECT, "check 2: max abs error 0.2"),
        _correct("files-a", "files", 1.96, faster=False),
    ]
    m.best = "rms_norm_fwd_kernel"
    m.unavailable = {"extra": "needs a server"}
    by = {o.generator: o for o in generator_outcomes(m, timed=True, min_speedup=1.05)}
    assert list(by) == ["kernelllm", "inductor", "template", "openai", "files", "extra"]
    assert by["template"].won and by["template"].best == "rms_norm_fwd_kernel"
    assert by["template"].why == "won: the fastest verified candidate, 4.00x eager, 3.00x torch.compile"
    assert by["kernelllm"].why == "declined: CUDA out of memory" and by["kernelllm"].candidates == 0
    assert by["inductor"].why == (
        "verified and faster (2.00x eager), but slower than rms_norm_fwd_kernel (4.00x)"
    )
    assert by["openai"].why == "none verified (2 incorrect, 1 rejected); first: check 2: max abs error 3.1"
    assert by["openai"].candidates == 3
    assert (
        by["files"].why == "verified, but 1.02x eager does not clear the 1.05x minimum and the timing noise"
    )
    assert by["extra"].why == "unavailable: needs a server" and not by["extra"].won
    assert [o.generator for o in by.values() if o.won] == ["template"]


def test_outcomes_on_cpu_pick_the_first_verified_and_say_times_are_not_measured() -> None:
    m = ModuleReport("m.py::Act", "m.py", "Act")
    m.candidates = [
        CandidateResult("a", "files", Status.CORRECT),
        CandidateResult("gelu_kernel", "template", Status.CORRECT),
    ]
    m.best = "a"
    files, template = generator_outcomes(m, timed=False, min_speedup=1.05)
    assert files.won and files.why == "won: the first verified candidate (times are not measured on CPU)"
    assert template.why == "verified, but a came first" and not template.won
