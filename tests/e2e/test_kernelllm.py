"""The KernelLLM path end to end with a tiny, randomly initialised Llama.

The tokenizer is trained here on the real prompt and both are saved with
``save_pretrained``; the generator loads them with ``from_pretrained`` exactly
as it would load facebook/KernelLLM. Random weights answer garbage: each
answer must come back as a clear ``error`` candidate, and nothing may crash.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "kernelllm_prompt_rmsnorm.txt"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from tests.tiny_llama import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), GOLDEN.read_text())


def test_kernelllm_cli_with_a_tiny_model(cli, tmp_path, tiny_model):
    report = tmp_path / "r.json"
    rc, _out, err = cli(
        [
            "run",
            "tests/problems/layers.py::RMSNorm",
            "--generator",
            "kernelllm",
            "--model",
            str(tiny_model),
            "--samples",
            "3",
            "--max-new-tokens",
            "24",
            "--seed",
            "0",
            "--json",
            str(report),
        ],
        env={"HF_HUB_OFFLINE": "1"},
    )
    assert rc == 0, err
    assert "Traceback" not in err
    [module] = json.loads(report.read_text())["modules"]
    cands = module["candidates"]
    assert [c["id"] for c in cands] == ["kernelllm-1", "kernelllm-2", "kernelllm-3"]
    for c in cands:
        assert c["status"] == "error"
        assert c["reason"] in (
            "the answer holds no code",
            "the answer was cut off at the token limit (raise max_new_tokens); not compiled",
        ) or c["reason"].startswith(("check", "raised", "syntax")), c["reason"]
        prov = c["provenance"]
        assert prov["model"] == str(tiny_model) and prov["generator"] == "kernelllm"
        assert prov["sampling"] == {
            "temperature": 0.6,
            "top_p": 0.95,
            "top_k": 0,
            "max_new_tokens": 24,
            "seed": 0,
        }
        assert len(prov["prompt_sha256"]) == 64 and isinstance(prov["raw_answer"], str)
        assert prov["finish_reason"] in ("stop", "length")
    assert module["best"] is None


def test_model_is_loaded_once_per_process(tiny_model):
    from runners import pipeline
    from runners.generators.kernelllm import KernelLLMGenerator, Sampling, load

    [problem], _ = pipeline.problems_for(str(ROOT / "tests/problems/layers.py"), str(ROOT), "RMSNorm")
    problem.build = {
        "source": "guess",
        "init_args": [],
        "init_kwargs": {"dim": {"value": 64}},
        "inputs": [{"tensor": {"shape": [2, 16, 64], "dtype": "float32", "dist": "normal"}}],
    }
    load.cache_clear()
    gen = KernelLLMGenerator(str(tiny_model), "cpu", Sampling(max_new_tokens=4, seed=1))
    first = gen.generate(problem, 2)
    second = gen.generate(problem, 2)
    assert len(first) == len(second) == 2
    info = load.cache_info()
    assert (info.misses, info.hits) == (1, 1)


def test_missing_weights_say_how_to_provide_them(cli, tmp_path):
    rc, _out, err = cli(
        ["run", "tests/problems/softmax.py", "--generator", "kernelllm", "--model", str(tmp_path / "nope")],
        env={"HF_HUB_OFFLINE": "1"},
    )
    assert rc == 2
    lines = err.strip().splitlines()
    assert lines[-1].startswith("kernelize: error: generator: cannot load model")
    assert "--model DIR" in lines[-1] and "Traceback" not in err
