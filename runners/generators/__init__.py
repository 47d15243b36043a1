"""Generators behind one protocol: ``generate(problem, n) -> list[Candidate]``."""

from __future__ import annotations

import os
from typing import Any

from runners.generators.base import Candidate, Generator, GeneratorError, Problem

AVAILABLE = ("files", "kernelllm", "openai", "template")


def make_generator(name: str, options: dict[str, Any]) -> Generator:
    """A generator by name; raises GeneratorError with what is missing.

    Options: ``candidates`` (files); none (template); ``model``, ``device``, ``temperature``,
    ``top_p``, ``max_new_tokens``, ``seed`` (kernelllm, openai); ``api_base``,
    ``api_key_env``, ``api_mode``, ``timeout_s`` (openai).
    """
    if name == "files":
        from runners.generators.files import FilesGenerator

        directory = options.get("candidates")
        if not directory:
            raise GeneratorError("the files generator needs --candidates DIR")
        return FilesGenerator(directory)
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


__all__ = ["AVAILABLE", "Candidate", "Generator", "GeneratorError", "Problem", "make_generator"]
