"""KernelLLM through transformers: the model card's completion prompt, sampled ``n`` times in one call.

The model is loaded once per process and reused (cached by model id, dtype and
device): a GPU worker pays the load once, not per task. Weights come from a
local folder or the Hub cache; with ``HF_HUB_OFFLINE=1`` nothing is fetched.
Remote code is never trusted: KernelLLM is a plain Llama.
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import asdict, dataclass
from typing import Any

from runners.generators import llm
from runners.generators.base import Candidate, GeneratorError, Problem

DEFAULT_MODEL = "facebook/KernelLLM"
_LOAD_LOCK = threading.Lock()


@dataclass(frozen=True)
class Sampling:
    """Defaults from the model card's script; its benchmark used temperature 1.0, top_p 0.97."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 0  # off
    max_new_tokens: int = 2048
    seed: int | None = None


def _offline() -> bool:
    return any(
        os.environ.get(v, "").lower() in ("1", "true", "yes")
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


@functools.lru_cache(maxsize=2)
def load(model_id: str, device: str, dtype: str) -> tuple[Any, Any]:
    """(tokenizer, model), loaded once per process for each (model, device, dtype)."""
    import torch

    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise GeneratorError(
            "the kernelllm generator needs transformers: pip install 'kernelize[llm]'"
        ) from None
    offline = _offline()
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_id, local_files_only=offline)
        model = AutoModelForCausalLM.from_pretrained(
            model_id, dtype=getattr(torch, dtype), local_files_only=offline
        )
    except (OSError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GeneratorError(
            f"cannot load model {model_id!r}: {first[:300]}. Provide the weights: on a machine that "
            f"reaches the Hugging Face Hub run `huggingface-cli download {DEFAULT_MODEL} --local-dir DIR` "
            "(the model's licence must be accepted first), copy DIR here and pass --model DIR"
        ) from None
    model.to(device).eval()  # type: ignore[arg-type]
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, model


class KernelLLMGenerator:
    name = "kernelllm"
    samples = True

    def __init__(
        self, model: str = DEFAULT_MODEL, device: str = "auto", sampling: Sampling | None = None
    ) -> None:
        import torch

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model_id = model
        self.device = device
        self.dtype = "bfloat16" if device == "cuda" else "float32"
        self.sampling = sampling or Sampling()

    def generate(self, problem: Problem, n: int) -> list[Candidate]:
        import torch

        prompt = llm.completion_prompt(problem)
        with _LOAD_LOCK:
            tokenizer, model = load(self.model_id, self.device, self.dtype)
        # The prompt already starts with <|begin_of_text|>: add no second BOS.
        encoded = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).to(self.device)
        s = self.sampling
        if s.seed is not None:
            torch.manual_seed(s.seed)
        with torch.no_grad():
            out = model.generate(
                **encoded,
                do_sample=True,
                temperature=s.temperature,
                top_p=s.top_p,
                top_k=s.top_k,
                max_new_tokens=s.max_new_tokens,
                num_return_sequences=n,
                pad_token_id=tokenizer.pad_token_id,
            )
        prompt_len = encoded["input_ids"].shape[1]
        eos = {tokenizer.eos_token_id} | set(_as_list(getattr(model.generation_config, "eos_token_id", None)))
        provenance = {
            "generator": self.name,
            "model": self.model_id,
            "device": self.device,
            "dtype": self.dtype,
            "sampling": asdict(s),
            "prompt_sha256": llm.sha256(prompt),
        }
        candidates = []
        for i, seq in enumerate(out, 1):
            new = seq[prompt_len:].tolist()
            stopped = any(t in eos for t in new)
            finish = "stop" if stopped or len(new) < s.max_new_tokens else "length"
            text = tokenizer.decode(new, skip_special_tokens=True)
            code, error = llm.extract_code(text, finish)
            candidates.append(
                Candidate(
                    id=f"kernelllm-{i}",
                    generator=self.name,
                    source=code or "",
                    provenance={**provenance, "finish_reason": finish, "raw_answer": llm.raw_answer(text)},
                    error=error,
                )
            )
        return candidates


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [int(value)]
