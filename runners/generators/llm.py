"""What the model generators share: the problem text, the prompts, and code extraction."""

from __future__ import annotations

import hashlib
import re

from runners import kernelbench, render
from runners.generators.base import GeneratorError, Problem

RAW_ANSWER_CHARS = 4000  # kept in the report for debugging; answers can be long
_FENCE = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CODE_START = re.compile(r"^(import |from |@triton|class |def |[A-Za-z_]\w* = )", re.MULTILINE)


def problem_text(problem: Problem) -> str:
    """The KernelBench file for ``problem``; needs the build resolved by the pipeline."""
    if problem.build is None:
        raise GeneratorError(f"{problem.target}: inputs were not resolved before generation")
    try:
        return kernelbench.problem_source(
            problem.source, problem.class_name, problem.build, problem.module.init_params
        )
    except ValueError as exc:
        raise GeneratorError(f"{problem.target}: cannot state the problem: {exc}") from None


def completion_prompt(problem: Problem) -> str:
    """KernelLLM's raw completion prompt (starts with <|begin_of_text|>, no chat template)."""
    return render.environment().get_template("prompts/kernelllm.j2").render(problem=problem_text(problem))


def chat_messages(problem: Problem) -> list[dict[str, str]]:
    env = render.environment()
    text = problem_text(problem)
    return [
        {"role": "system", "content": env.get_template("prompts/chat_system.j2").render()},
        {"role": "user", "content": env.get_template("prompts/chat_user.j2").render(problem=text)},
    ]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def extract_code(text: str, finish_reason: str | None) -> tuple[str | None, str | None]:
    """(code, None) or (None, why not).

    Fenced blocks with or without a language tag come first: the one holding
    ``class ModelNew``, else the longest. Without a fence the answer is taken
    as raw code from its first code-looking line (KernelLLM often answers so).
    An answer cut off at the token limit is flagged, never compiled.
    """
    if finish_reason == "length":
        return None, "the answer was cut off at the token limit (raise max_new_tokens); not compiled"
    blocks = [m.group(2) for m in _FENCE.finditer(text)]
    blocks = [b.strip("\n") for b in blocks if b.strip()]
    if blocks:
        with_class = [b for b in blocks if "class ModelNew" in b]
        return max(with_class or blocks, key=len) + "\n", None
    start = _CODE_START.search(text)
    if start is None or ("class " not in text and "def " not in text):
        return None, "the answer holds no code"
    return text[start.start() :].strip("\n") + "\n", None


def raw_answer(text: str) -> str:
    if len(text) <= RAW_ANSWER_CHARS:
        return text
    return text[:RAW_ANSWER_CHARS] + f"\n… [{len(text) - RAW_ANSWER_CHARS} more characters]"
