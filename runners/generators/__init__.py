"""Generators behind one protocol: ``generate(problem, n) -> list[Candidate]``."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from runners.generators.base import Candidate, Generator, GeneratorError, Problem

AVAILABLE = ("files", "inductor", "kernelllm", "openai", "template")

# What ``kernelize run`` and the GPU workers ask when no generator is named: every one of these
# that this machine can run, in this order. Unavailable ones are reported with the reason.
PORTFOLIO = ("kernelllm", "inductor", "template")


def make_generator(name: str, options: dict[str, Any]) -> Generator:
    """A generator by name; raises GeneratorError with what is missing.

    Options: ``candidates`` (files); none (template); ``device``, ``dtype`` (inductor); ``model``,
    ``device``, ``temperature``, ``top_p``, ``max_new_tokens``, ``seed`` (kernelllm, openai); ``api_base``,
    ``api_key_env``, ``api_mode``, ``timeout_s`` (openai).
    """
    if name == "files":
        from runners.generators.files import FilesGenerator

        directory = options.get("candidates")
        if not directory:
            raise GeneratorError("the files generator needs --candidates DIR")
        return FilesGenerator(directory)
    if name == "inductor":
        from runners.generators.inductor import InductorGenerator

        return InductorGenerator(options.get("device") or "auto", options.get("dtype"))
    if name == "kernelllm":
        from runners.generators.kernelllm import DEFAULT_MODEL, KernelLLMGenerator, Sampling

        return KernelLLMGenerator(
            options.get("model") or DEFAULT_MODEL, options.get("device", "auto"), _sampling(Sampling, options)
        )
    if name == "openai":
        return _openai(options)
    if name == "template":
        from runners.generators.template import TemplateGenerator

        return TemplateGenerator()
    raise GeneratorError(f"unknown generator {name!r} (available: {', '.join(AVAILABLE)})")


def default_portfolio(device: str, options: dict[str, Any] | None = None) -> tuple[list[str], dict[str, str]]:
    """The generators this machine can run unasked, and why each of the others cannot."""
    options = options or {}
    names: list[str] = []
    unavailable: dict[str, str] = {}
    for name in PORTFOLIO:
        why = unavailable_reason(name, device, options)
        if why:
            unavailable[name] = why
        else:
            names.append(name)
    return names, unavailable


def unavailable_reason(name: str, device: str, options: dict[str, Any]) -> str | None:
    """Why ``name`` cannot be part of the default portfolio here, or None."""
    if name == "kernelllm":
        return _kernelllm_missing(device, options.get("model"))
    if name == "inductor" and device != "cuda":
        from runners.generators.inductor import NEEDS_CUDA

        return NEEDS_CUDA.removeprefix("inductor: ")
    return None


def _kernelllm_missing(device: str, model: str | None) -> str | None:
    from runners.generators.kernelllm import DEFAULT_MODEL

    model = model or DEFAULT_MODEL
    if importlib.util.find_spec("transformers") is None:
        return "transformers is not installed (pip install -e '.[llm]')"
    if device != "cuda":
        return "no CUDA GPU: an 8B model samples too slowly on the CPU (--generator kernelllm runs it anyway)"
    if Path(model).is_dir():
        return None
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(model, "config.json"), str):
        return f"no weights for {model} on this machine (download them once, or point --model at a folder)"
    return None


def _sampling(cls: Any, options: dict[str, Any]) -> Any:
    fields = ("temperature", "top_p", "max_new_tokens", "seed")
    return cls(**{k: options[k] for k in fields if options.get(k) is not None})


def _openai(options: dict[str, Any]) -> Generator:
    from runners.generators import llm
    from runners.generators.kernelllm import DEFAULT_MODEL
    from runners.generators.openai import OpenAIClient, OpenAIConfig, OpenAIGenerator

    base = options.get("api_base")
    if not base:
        raise GeneratorError("the openai generator needs --api-base URL (e.g. http://127.0.0.1:8000/v1)")
    key_env = options.get("api_key_env") or "OPENAI_API_KEY"
    config = OpenAIConfig(
        base_url=base,
        model=options.get("model") or DEFAULT_MODEL,
        api_key=os.environ.get(key_env) or None,
        mode=options.get("api_mode") or "completions",
        **{k: options[k] for k in ("temperature", "top_p", "timeout_s") if options.get(k) is not None},
        **({"max_tokens": options["max_new_tokens"]} if options.get("max_new_tokens") else {}),
    )
    return OpenAIGenerator(OpenAIClient(config), llm.completion_prompt, llm.chat_messages, llm.extract_code)


__all__ = [
    "AVAILABLE",
    "PORTFOLIO",
    "Candidate",
    "Generator",
    "GeneratorError",
    "Problem",
    "default_portfolio",
    "make_generator",
    "unavailable_reason",
]
