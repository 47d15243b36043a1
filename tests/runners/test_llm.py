"""The problem a model sees, its prompt (golden file), and code extraction from answers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from runners import kernelbench, pipeline
from runners.generators import GeneratorError, llm

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "kernelllm_prompt_rmsnorm.txt"
RMS_BUILD = {
    "source": "guess",
    "init_args": [],
    "init_kwargs": {"dim": {"value": 64}},
    "inputs": [{"tensor": {"shape": [2, 16, 64], "dtype": "float32", "dist": "normal"}}],
}


def rmsnorm_problem():
    [problem], _ = pipeline.problems_for(str(ROOT / "tests/problems/layers.py"), str(ROOT), "RMSNorm")
    problem.build = RMS_BUILD
    return problem


# -- the prompt --------------------------------------------------------------


def test_completion_prompt_matches_the_golden_file():
    assert llm.completion_prompt(rmsnorm_problem()) == GOLDEN.read_text()


def test_completion_prompt_is_the_model_cards_interface():
    text = llm.completion_prompt(rmsnorm_problem())
    assert text.startswith("<|begin_of_text|>You write custom Triton kernels to replace the pytorch")
    assert "The example new arch with custom Triton kernels looks like this:" in text
    assert "def add_kernel(" in text and "class ModelNew(nn.Module):" in text
    assert "You are given the following architecture:" in text
    assert text.rstrip().endswith("Just output the new model code, no other text, and NO testing code!")
    assert text.count("<|begin_of_text|>") == 1


def test_chat_messages_carry_the_same_problem():
    system, user = llm.chat_messages(rmsnorm_problem())
    assert system["role"] == "system" and "<|begin_of_text|>" not in system["content"]
    assert user["role"] == "user" and "class Model(tnn.Module)" in user["content"]
    assert "ModelNew" in user["content"]


def test_prompt_needs_resolved_inputs():
    problem = rmsnorm_problem()
    problem.build = None
    with pytest.raises(GeneratorError, match="inputs were not resolved"):
        llm.completion_prompt(problem)


# -- the KernelBench problem -------------------------------------------------

LAYERS = (ROOT / "tests/problems/layers.py").read_text()


def test_problem_renames_the_class_and_writes_the_input_functions():
    src = kernelbench.problem_source(LAYERS, "RMSNorm", RMS_BUILD, ("dim", "eps"))
    tree = ast.parse(src)
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    assert classes == ["Model"]
    assert "def get_inputs():\n    return [torch.randn(2, 16, 64)]" in src
    assert "def get_init_inputs():\n    return [64]" in src
    assert "helper" not in src  # not used by RMSNorm: left out
    namespace: dict = {}
    exec(compile(src, "<problem>", "exec"), namespace)
    model = namespace["Model"](*namespace["get_init_inputs"]())
    assert model(*namespace["get_inputs"]()).shape == (2, 16, 64)


def test_problem_inlines_the_base_class_and_constants():
    source = (
        "import torch\nfrom torch import nn\nSCALE = 2.0\n\n"
        "def act(x):\n    return torch.relu(x) * SCALE\n\n"
        "class Base(nn.Module):\n    def forward(self, x):\n        return act(x)\n\n"
        "class Unused(nn.Module):\n    pass\n\n"
        "class Head(Base):\n    def __init__(self, d):\n        super(Head, self).__init__()\n"
    )
    build = {
        "init_args": [{"value": 8}],
        "init_kwargs": {},
        "inputs": [
            {"tensor": {"shape": [3, 8], "dtype": "float16", "dist": "uniform", "low": -1.0, "high": 1.0}},
        ],
    }
    src = kernelbench.problem_source(source, "Head", build, ("d",))
    assert "SCALE = 2.0" in src and "def act(x)" in src and "class Base(nn.Module)" in src
    assert "class Unused" not in src
    assert "class Model(Base)" in src and "super(Model, self)" in src
    assert "torch.rand(3, 8, dtype=torch.float16) * 2.0 + -1.0" in src
    namespace: dict = {}
    exec(compile(src, "<problem>", "exec"), namespace)
    out = namespace["Model"](*namespace["get_init_inputs"]())(torch_zeros := __import__("torch").ones(3, 8))
    assert out.shape == torch_zeros.shape


def test_a_helper_already_named_model_steps_aside():
    source = (
        "import torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n\n"
        "class Wrapper(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.inner = Model()\n    def forward(self, x):\n        return self.inner(x)\n"
    )
    build = {"init_args": [], "init_kwargs": {}, "inputs": [{"value": 3}]}
    src = kernelbench.problem_source(source, "Wrapper", build, ())
    assert "class Model_(nn.Module)" in src and "self.inner = Model_()" in src
    assert "class Model(nn.Module)" in src


def test_keyword_arguments_become_positional_in_signature_order():
    build = {"init_args": [], "init_kwargs": {"b": {"value": 2}, "a": {"value": 1}}, "inputs": []}
    assert kernelbench.init_positional(build, ("a", "b", "c")) == [{"value": 1}, {"value": 2}]
    gap = {"init_args": [], "init_kwargs": {"c": {"value": 3}}, "inputs": []}
    assert kernelbench.init_positional(gap, ("a", "b", "c")) is None


@pytest.mark.parametrize(
    ("spec", "expr"),
    [
        ({"shape": [4, 5], "dtype": "float32", "dist": "normal"}, "torch.randn(4, 5)"),
        ({"shape": [4], "dtype": "bfloat16", "dist": "normal"}, "torch.randn(4, dtype=torch.bfloat16)"),
        (
            {"shape": [2, 3], "dtype": "int64", "dist": "randint", "low": 0, "high": 7},
            "torch.randint(0, 7, (2, 3,), dtype=torch.int64)",
        ),
        ({"shape": [6], "dtype": "bool", "dist": "bool"}, "torch.rand(6) < 0.5"),
        (
            {"shape": [6], "dtype": "float32", "dist": "uniform", "low": 0.0, "high": 1.0},
            "torch.rand(6, dtype=torch.float32)",
        ),
    ],
)
def test_tensor_expressions(spec, expr):
    assert kernelbench.tensor_expr(spec) == expr


# -- extraction --------------------------------------------------------------

CODE = "import torch\nimport triton\n\nclass ModelNew(torch.nn.Module):\n    pass\n"


def test_extract_prefers_the_block_with_modelnew():
    answer = f"Here you go:\n```python\nprint('short')\n```\nand\n```python\n{CODE}```\nDone."
    assert llm.extract_code(answer, "stop") == (CODE, None)


def test_extract_untagged_fence():
    assert llm.extract_code(f"```\n{CODE}```", "stop") == (CODE, None)


def test_extract_longest_block_without_modelnew():
    long = "def a():\n    return 1\n\ndef b():\n    return 2\n"
    code, error = llm.extract_code(f"```py\nx = 1\n```\n```py\n{long}```", "stop")
    assert (code, error) == (long, None)


def test_extract_raw_code_without_a_fence():
    answer = "Sure, the optimized model is below.\n" + CODE
    assert llm.extract_code(answer, "stop") == (CODE, None)


def test_extract_flags_truncated_answers():
    code, error = llm.extract_code(f"```python\n{CODE}", "length")
    assert code is None and "cut off at the token limit" in error


def test_extract_unterminated_fence_when_the_model_stopped():
    assert llm.extract_code(f"```python\n{CODE}", "stop") == (CODE, None)


@pytest.mark.parametrize("answer", ["", "I cannot help with that.", "tok tok tok 3 4 5 ;;"])
def test_extract_reports_answers_without_code(answer):
    assert llm.extract_code(answer, "stop") == (None, "the answer holds no code")


def test_raw_answer_is_truncated_with_a_count():
    text = "x" * (llm.RAW_ANSWER_CHARS + 10)
    kept = llm.raw_answer(text)
    assert kept.startswith("x" * llm.RAW_ANSWER_CHARS) and kept.endswith("[10 more characters]")
