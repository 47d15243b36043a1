"""Generation through the KernelLLM path with a tiny random Llama: batched ``n``, bf16 on CUDA.

    python bench/kernelllm_generate.py [--device cuda] [--max-new-tokens 256]

The weights are random, so the figures measure the path (prompt rendering,
tokenising the ~2,000-token prompt, one batched ``generate`` call, decoding and
extraction), not KernelLLM's own speed. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runners import pipeline  # noqa: E402
from runners.generators import llm  # noqa: E402
from runners.generators.kernelllm import KernelLLMGenerator, Sampling, load  # noqa: E402
from tests.tiny_llama import build_tiny_llama  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    args = parser.parse_args()

    [problem], _ = pipeline.problems_for(str(ROOT / "tests/problems/layers.py"), str(ROOT), "RMSNorm")
    problem.build = {
        "source": "guess",
        "init_args": [],
        "init_kwargs": {"dim": {"value": 64}},
        "inputs": [{"tensor": {"shape": [2, 16, 64], "dtype": "float32", "dist": "normal"}}],
    }
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_llama(Path(tmp), llm.completion_prompt(problem))
        sampling = Sampling(max_new_tokens=args.max_new_tokens, seed=0)
        gen = KernelLLMGenerator(str(model_dir), args.device, sampling)
        start = time.perf_counter()
        tokenizer, model = load(gen.model_id, gen.device, gen.dtype)
        load_s = time.perf_counter() - start
        prompt_tokens = len(tokenizer(llm.completion_prompt(problem), add_special_tokens=False)["input_ids"])
        print(
            f"device {gen.device}, dtype {next(model.parameters()).dtype}, prompt {prompt_tokens} tokens, "
            f"load {load_s:.2f} s"
        )
        print("| n | wall s | answers | finish reasons |")
        print("|---|---|---|---|")
        for n in (1, 4, 8):
            start = time.perf_counter()
            cands = gen.generate(problem, n)
            wall = time.perf_counter() - start
            reasons = sorted({c.provenance["finish_reason"] for c in cands})
            print(f"| {n} | {wall:.2f} | {len(cands)} | {', '.join(reasons)} |", flush=True)


if __name__ == "__main__":
    main()
