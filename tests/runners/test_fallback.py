"""The suggested code keeps the original computation for inputs Triton cannot run on.

Unit tests of the source transformation, then the checks on real candidates
(CPU, Triton interpreter): the combined class is what gets verified, in the
original file's namespace, and its original path is run on CPU inputs too.
"""

from __future__ import annotations

import ast
import hashlib
import json
import textwrap
from pathlib import Path

import pytest

from runners.fallback import (
    EAGER,
    KERNELIZED,
    TRITON,
    FallbackError,
    is_kernelized,
    registers_ops,
    with_original_path,
)

ROOT = Path(__file__).resolve().parents[2]
ORIGINAL = textwrap.dedent(
    '''
    import torch
    from torch import nn

    class Norm(nn.Module):
        """Docstring."""

        eps = 1e-5

        def __init__(self, dim: int, affine: bool = True):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def _stats(self, x):
            return x.pow(2).mean(-1, keepdim=True)

        def forward(self, x, mask=None, *rest, scale: float = 1.0, **extra):
            return x * torch.rsqrt(self._stats(x) + self.eps) * self.weight * scale
    '''
)
CANDIDATE = textwrap.dedent(
    """
    import torch
    import triton


    class Norm(torch.nn.Module):
        def __init__(self, hidden, flag=True):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(hidden))
            self.flag = flag and hidden > 0

        def forward(self, x, mask=None, *rest, scale=1.0, **extra):
            return x
    """
)


def _class(source: str, name: str = "Norm") -> ast.ClassDef:
    tree = ast.parse(source)
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}


def test_forward_dispatches_with_the_original_signature():
    out = with_original_path(CANDIDATE, ORIGINAL, "Norm")
    methods = _methods(_class(out))
    assert {"__init__", TRITON, EAGER, "forward", "_stats"} <= set(methods)
    forward = methods["forward"]
    assert ast.unparse(forward.args) == "self, x, mask=None, *rest, scale: float=1.0, **extra"
    body = ast.unparse(forward)
    assert f"return self.{TRITON}(x, mask, *rest, scale=scale, **extra)" in body
    assert f"return self.{EAGER}(x, mask, *rest, scale=scale, **extra)" in body
    assert "t.is_cuda" in body and 'os.environ.get("TRITON_INTERPRET")' in body.replace("'", '"')
    # The original forward comes along unchanged but for its name; the class attribute too.
    assert "self._stats(x) + self.eps" in ast.unparse(methods[EAGER])
    assert any(isinstance(n, ast.Assign) and ast.unparse(n) == "eps = 1e-05" for n in _class(out).body)


def test_compiled_the_suggestion_keeps_the_kernels_only_when_they_are_custom_ops():
    # Plain launches: Dynamo cannot trace them, so compiled, the original computation runs.
    plain = ast.unparse(_methods(_class(with_original_path(CANDIDATE, ORIGINAL, "Norm")))["forward"])
    assert plain.index("torch.compiler.is_compiling()") < plain.index(f"self.{TRITON}(")
    assert f"if torch.compiler.is_compiling():\n        return self.{EAGER}(" in plain
    assert not registers_ops(CANDIDATE)
    # The same kernel behind a custom op: torch.compile calls it as one op, so the kernel stays.
    as_op = CANDIDATE + textwrap.dedent(
        """
        @library.custom_op("kernels::norm", mutates_args=())
        def launch(x: torch.Tensor) -> torch.Tensor:
            return x.clone()
        """
    )
    assert registers_ops(as_op)
    # The template generator's helper, as a suggestion names it for its class.
    helper = "def _custom_op_Norm(fn):\n    return library.custom_op('k::f', fn, mutates_args=())\n"
    assert registers_ops(helper + "@_custom_op_Norm\ndef f(x):\n    return x\n")
    assert not registers_ops("def helper(fn):\n    return fn\n@helper\ndef f(x):\n    return x\n")
    compiled = ast.unparse(_methods(_class(with_original_path(as_op, ORIGINAL, "Norm")))["forward"])
    assert "is_compiling" not in compiled
    assert not registers_ops("def f(:")


def test_a_class_already_kernelized_is_recognised_and_not_run_again(tmp_path):
    from runners import pipeline

    out = with_original_path(CANDIDATE, ORIGINAL, "Norm")
    assert is_kernelized(out, "Norm") and not is_kernelized(ORIGINAL, "Norm")
    assert not is_kernelized(out, "Other") and not is_kernelized("def broken(:", "Norm")
    path = tmp_path / "norm.py"
    path.write_text(out)
    [problem], _ = pipeline.problems_for(str(path), str(tmp_path), "Norm", {})
    report = pipeline.kernelize(problem, [], pipeline.EngineSettings(device="cpu"))
    # Before anything is built or run: nothing to generate, and never "rejected".
    assert (report.status, report.reason, report.candidates) == ("kernelized", KERNELIZED, [])


def test_imports_it_needs_are_added_once():
    out = with_original_path(CANDIDATE, ORIGINAL, "Norm")
    imports = [ast.unparse(n) for n in ast.parse(out).body if isinstance(n, ast.Import)]
    assert imports.count("import os") == 1 and imports.count("import torch") == 1
    again = with_original_path("import os\n" + CANDIDATE, ORIGINAL, "Norm")
    assert [ast.unparse(n) for n in ast.parse(again).body].count("import os") == 1


def test_renamed_constructor_arguments_get_the_original_names_back():
    init = ast.unparse(_methods(_class(with_original_path(CANDIDATE, ORIGINAL, "Norm")))["__init__"])
    assert "def __init__(self, dim: int, affine: bool=True):" in init
    assert "torch.ones(dim)" in init and "self.flag = affine and dim > 0" in init


def test_constructor_that_already_matches_is_left_as_written():
    cand = CANDIDATE.replace("hidden, flag=True", "dim, affine=True").replace("hidden", "dim")
    cand = cand.replace("flag", "affine")
    out = with_original_path(cand, ORIGINAL, "Norm")
    assert "def __init__(self, dim, affine=True):" in out  # the candidate's own text, untouched


def test_helpers_the_candidate_defines_itself_are_not_duplicated():
    cand = CANDIDATE.replace(
        "    def forward(", "    def _stats(self, x):\n        return x\n\n    def forward("
    )
    out = with_original_path(cand, ORIGINAL, "Norm")
    names = [n.name for n in _class(out).body if isinstance(n, ast.FunctionDef)]
    assert names.count("_stats") == 1


@pytest.mark.parametrize(
    ("candidate", "original", "message"),
    [
        (CANDIDATE.replace("def forward(", "def run("), ORIGINAL, "has no forward method"),
        (CANDIDATE, ORIGINAL.replace("def forward(", "def apply("), "defines no forward of its own"),
        (CANDIDATE.replace("class Norm", "class Other"), ORIGINAL, "defines no top-level class Norm"),
        (CANDIDATE.replace("hidden, flag=True", "hidden"), ORIGINAL, "takes different arguments"),
        (CANDIDATE.replace("self.flag = flag", "dim = 3\n        self.flag = flag"), ORIGINAL, "for other"),
        (CANDIDATE + "\n    def _forward_eager(self):\n        pass\n", ORIGINAL, "already defines"),
        ("def broken(:\n", ORIGINAL, "does not parse"),
    ],
)
def test_what_cannot_be_combined_is_refused_with_the_reason(candidate, original, message):
    with pytest.raises(FallbackError, match=message):
        with_original_path(candidate, original, "Norm")


def test_the_combined_class_runs_both_paths_on_cpu(monkeypatch):
    """Executed in the original file's namespace: the original path on CPU, the kernel path when asked."""
    import torch

    out = with_original_path(CANDIDATE, ORIGINAL, "Norm")
    namespace: dict[str, object] = {}
    exec(compile(ORIGINAL, "original.py", "exec"), namespace)
    exec(compile(out, "combined.py", "exec"), namespace)
    module = namespace["Norm"](dim=4)  # type: ignore[operator]
    x = torch.randn(2, 4)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    assert torch.allclose(module(x), expected)  # the original computation
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with torch.no_grad():
        assert module(x) is x  # the candidate's forward
    with torch.inference_mode():
        assert module(x) is x


def test_when_autograd_records_the_original_computation_runs(monkeypatch):
    """A kernel's output has no autograd history: under training the suggestion takes the original
    path, whether the gradient is wanted for a parameter or only for an input."""
    import torch

    namespace: dict[str, object] = {}
    exec(compile(ORIGINAL, "original.py", "exec"), namespace)
    exec(compile(with_original_path(CANDIDATE, ORIGINAL, "Norm"), "combined.py", "exec"), namespace)
    module = namespace["Norm"](dim=4)  # type: ignore[operator]
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x = torch.randn(2, 4)
    out = module(x)  # grad on, the parameter requires it
    assert out is not x and out.grad_fn is not None
    module.requires_grad_(False)  # frozen (fine-tuning something else)
    assert module(x) is x  # nothing to record: the kernel
    leaf = x.clone().requires_grad_(True)
    out = module(leaf)
    assert out is not leaf and out.grad_fn is not None
    out.sum().backward()
    assert leaf.grad is not None


# ---------------------------------------------------------------------------
# Through the checks (sandboxed, Triton interpreter)


@pytest.fixture(scope="module")
def scaled(cli, tmp_path_factory):
    out = tmp_path_factory.mktemp("scaled") / "report.json"
    env = {"TRITON_INTERPRET": "1"}
    args = ["run", "tests/problems/scaled.py::ScaledTanh", "--candidates", "tests/candidates/scaled"]
    rc, _, err = cli([*args, "--device", "cpu", "--json", str(out), "--quiet"], env=env)
    assert rc == 0, err
    report = json.loads(out.read_text())
    return {c["id"]: c for c in report["modules"][0]["candidates"]}, report["modules"][0]


def test_a_candidate_leaning_on_the_original_helpers_is_correct_and_suggested_combined(scaled):
    candidates, module = scaled
    assert candidates["ok.py"]["status"] == "correct", candidates["ok.py"]["reason"]
    assert module["best"] == "ok.py"
    best = module["best_source"]
    assert f"def {EAGER}(self, x, *, clamp: bool = True):" in best  # the original's text
    assert "def _shift(self, x):" in best and "offset = 0.5" in best
    assert "def __init__(self, features: int, scale: float=2.0):" in best


def test_a_candidate_whose_original_path_breaks_is_not_correct(scaled):
    candidates, _ = scaled
    bad = candidates["renamed_attribute.py"]
    assert bad["status"] == "incorrect"
    assert bad["reason"].startswith(
        "check 3 (original path, CPU inputs): the original computation raised: AttributeError"
    )


def test_the_suggestion_says_training_takes_the_original_path(scaled):
    candidates, module = scaled
    assert candidates["ok.py"]["training"] == "original path (no backward kernel yet)"
    assert "torch.is_grad_enabled()" in module["best_source"]


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("detached_helper.py", "gradient of parameter bias: output: max abs error"),
        ("wrong_backward.py", "gradient of input 0: output: max abs error"),
    ],
)
def test_gradients_that_differ_from_the_original_are_caught(scaled, name, fragment):
    """Forward outputs are right (grad off, checks 2-4 and the original path pass); only the gradients,
    taken with grad on for an upstream gradient the checker chose, differ."""
    candidates, _ = scaled
    assert candidates[name]["status"] == "incorrect"
    reason = candidates[name]["reason"]
    assert reason.startswith("training (") and fragment in reason, reason


def test_kernel_only_verifies_the_candidate_alone(cli, tmp_path):
    out = tmp_path / "report.json"
    args = ["run", "tests/problems/scaled.py::ScaledTanh", "--candidates", "tests/candidates/scaled"]
    env = {"TRITON_INTERPRET": "1"}
    rc, _, err = cli([*args, "--kernel-only", "--device", "cpu", "--json", str(out), "--quiet"], env=env)
    assert rc == 0, err
    module = json.loads(out.read_text())["modules"][0]
    by_id = {c["id"]: c for c in module["candidates"]}
    # Alone, the kernel is right (the attribute's name does not matter to it) and the original's
    # helper is missing from the code, which is fine: nothing calls it.
    assert by_id["renamed_attribute.py"]["status"] == "correct", by_id["renamed_attribute.py"]["reason"]
    assert EAGER not in (module["best_source"] or "")


# ---------------------------------------------------------------------------
# Candidates that bring their own backward


BACKWARD = textwrap.dedent(
    """
    import torch
    import triton


    @triton.jit
    def _scale_kernel(x_ptr, out_ptr, n):
        pass


    @triton.jit
    def _scale_bwd_kernel(d_ptr, out_ptr, n):
        pass


    def _bwd_launch(n):
        return (n,)


    def _shared(x):
        return x


    class _ScaleFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.save_for_backward(weight)
            return _shared(x * weight)

        @staticmethod
        def backward(ctx, d_out):
            (weight,) = ctx.saved_tensors
            grid = _bwd_launch(d_out.numel())
            _scale_bwd_kernel[grid](d_out, d_out, d_out.numel())
            return _shared(d_out * weight), None


    class Norm(torch.nn.Module):
        def __init__(self, dim, affine=True):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(dim))

        def forward(self, x, mask=None, *rest, scale=1.0, **extra):
            return _ScaleFunction.apply(x, self.weight)
    """
)


def test_an_applied_autograd_function_with_a_backward_is_detected():
    from runners.fallback import has_backward

    assert has_backward(BACKWARD, "Norm")
    assert not has_backward(CANDIDATE, "Norm")
    # Applied elsewhere than forward (a helper the original path may call): not the kernel path's.
    helper = BACKWARD.replace("return _ScaleFunction.apply(x, self.weight)", "return self._scale(x)")
    assert not has_backward(
        helper + "\n    def _scale(self, x):\n        return _ScaleFunction.apply(x)\n", "Norm"
    )
    # A Function without a backward brings no gradients.
    assert not has_backward(BACKWARD.replace("def backward(ctx, d_out)", "def other(ctx, d_out)"), "Norm")


def test_with_a_backward_training_takes_the_kernel_path(monkeypatch):
    import torch

    out = with_original_path(BACKWARD, ORIGINAL, "Norm")
    forward = ast.unparse(_methods(_class(out))["forward"])
    assert "records" not in forward and "is_grad_enabled" not in forward
    namespace: dict[str, object] = {}
    exec(compile(ORIGINAL, "original.py", "exec"), namespace)
    exec(compile(out.replace("@triton.jit", ""), "combined.py", "exec"), namespace)
    module = namespace["Norm"](dim=4)  # type: ignore[operator]
    calls: list[str] = []
    triton_path, original_path = getattr(module, TRITON), getattr(module, EAGER)
    monkeypatch.setattr(module, TRITON, lambda *a, **k: calls.append("triton") or triton_path(*a, **k))
    monkeypatch.setattr(module, EAGER, lambda *a, **k: calls.append("original") or original_path(*a, **k))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    leaf = torch.randn(2, 4, requires_grad=True)
    module(leaf)
    monkeypatch.delenv("TRITON_INTERPRET")
    module(leaf)  # CPU tensors without the interpreter: the original computation
    assert calls == ["triton", "original"]
    # Asked to leave the backward out, the dispatch is the one without it.
    assert "records" in ast.unparse(
        _methods(_class(with_original_path(BACKWARD, ORIGINAL, "Norm", False)))["forward"]
    )


def test_dropping_the_backward_removes_what_only_it_uses():
    from runners.fallback import drop_backward, has_backward

    out = drop_backward(BACKWARD, "Norm")
    tree = ast.parse(out)
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assert names == {"_scale_kernel", "_shared", "_ScaleFunction", "Norm"}  # the forward's own stay
    assert {n.name for n in _class(out, "_ScaleFunction").body if isinstance(n, ast.FunctionDef)} == {
        "forward"
    }
    assert not has_backward(out, "Norm")
    assert "\n\n\n\n" not in out
    assert drop_backward(CANDIDATE, "Norm").strip() == CANDIDATE.strip()  # nothing to drop


def _training_run(cli, tmp: Path, names: list[str]) -> tuple[dict[str, dict], dict]:
    folder = tmp / "candidates" / "RMSNorm"
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_text((ROOT / "tests/candidates/training/RMSNorm" / name).read_text())
    out = tmp / "report.json"
    args = ["run", "tests/problems/layers.py::RMSNorm", "--candidates", str(tmp / "candidates")]
    rc, _, err = cli([*args, "--device", "cpu", "--json", str(out), "--quiet"], env={"TRITON_INTERPRET": "1"})
    assert rc == 0, err
    module = json.loads(out.read_text())["modules"][0]
    return {c["id"]: c for c in module["candidates"]}, module


@pytest.fixture(scope="module")
def wrong_backward(cli, tmp_path_factory):
    return _training_run(cli, tmp_path_factory.mktemp("wrong"), ["wrong_backward.py"])


@pytest.fixture(scope="module")
def triton_backward(cli, tmp_path_factory):
    return _training_run(cli, tmp_path_factory.mktemp("right"), ["triton_backward.py"])


def test_a_right_triton_backward_is_suggested_for_training(triton_backward):
    from runners.judge import TRAINING_TRITON

    candidates, module = triton_backward
    cand = candidates["triton_backward.py"]
    assert cand["status"] == "correct", cand["reason"]
    assert cand["training"] == TRAINING_TRITON
    assert "_RMSNormFunction_RMSNorm.apply(" in module["best_source"]
    assert "is_grad_enabled" not in module["best_source"]  # training takes the kernels


def test_a_wrong_backward_is_caught_and_the_original_path_is_suggested(wrong_backward):
    candidates, module = wrong_backward
    cand = candidates["wrong_backward.py"]
    assert cand["status"] == "correct", cand["reason"]
    training = cand["training"]
    assert training.startswith("original path (the Triton backward was wrong: training ("), training
    assert "gradient of input 0" in training  # the weight's gradient was right
    assert cand["provenance"]["backward_rejected"].startswith("training (")
    best = module["best_source"]
    assert module["best"] == "wrong_backward.py"
    # What is suggested is what passed: no backward left in it, the original ops under training.
    assert "def backward" not in best and "_rms_norm_bwd_kernel" not in best
    assert "torch.is_grad_enabled()" in best and "_rms_norm_fwd_kernel_RMSNorm[" in best
    assert cand["source_sha256"] == hashlib.sha256(best.encode()).hexdigest()


def test_the_original_class_frame_is_kept_decorators_docstring_and_base():
    """Only the computation is the suggestion's to change: a transformers class's
    ``@use_kernel_forward_from_hub("RMSNorm")`` and its docstring survive; the base keeps the
    original's spelling where the suggestion binds that name too."""
    original = ORIGINAL.replace(
        "class Norm(nn.Module):",
        '@use_kernel_forward_from_hub("RMSNorm")\n@dataclass_like\nclass Norm(nn.Module):',
    )
    out = with_original_path("from torch import nn\n" + CANDIDATE, original, "Norm")
    cls = _class(out)
    assert [ast.unparse(d) for d in cls.decorator_list] == [
        "use_kernel_forward_from_hub('RMSNorm')",
        "dataclass_like",
    ]
    assert ast.get_docstring(cls) == "Docstring."
    assert [ast.unparse(b) for b in cls.bases] == ["nn.Module"]
    # Where the suggestion does not bind the original's name for the base, its own spelling stays.
    out = with_original_path(CANDIDATE, original, "Norm")
    assert [ast.unparse(b) for b in _class(out).bases] == ["torch.nn.Module"]
    # A generated class with a docstring of its own keeps it.
    own = CANDIDATE.replace(
        "class Norm(torch.nn.Module):\n", 'class Norm(torch.nn.Module):\n    """Mine."""\n\n'
    )
    assert ast.get_docstring(_class(with_original_path(own, original, "Norm"))) == "Mine."


_SCALE = textwrap.dedent(
    """
    import torch


    class Scale(torch.nn.Module):
        def __init__(self, factor: float = 2.0):
            super().__init__()
            self.factor = factor
            self.weight = torch.nn.Parameter(torch.ones(4))

        def forward(self, x):
    """
)
GUARDED = _SCALE + textwrap.indent(
    textwrap.dedent(
        '''
        """The kernel's path."""
        if self.weight.dtype != torch.float32:
            raise NotImplementedError("the kernel is specialised to weight.dtype == torch.float32")
        if self.factor != 2.0:
            raise NotImplementedError(
                "the kernel is specialised to factor == 2.0"
            )
        return x
        '''
    ).strip("\n"),
    "        ",
)
GUARDED_ORIGINAL = _SCALE + "        return x * self.factor * self.weight\n"


def test_a_kernels_guards_take_the_original_computation_instead_of_raising(monkeypatch):
    """A kernel specialised to a dtype or a setting refuses the others in leading guards; in the
    suggestion a model in another dtype, or built with another setting, runs the original code."""
    import torch

    out = with_original_path(GUARDED, GUARDED_ORIGINAL, "Scale")
    assert "raise NotImplementedError" not in out
    assert (
        "            # the kernel is specialised to weight.dtype == torch.float32; otherwise the original "
        "computation\n            return self._forward_eager(x)\n"
    ) in out
    assert (
        "            # the kernel is specialised to factor == 2.0; otherwise the original computation\n"
        in out
    )
    namespace: dict[str, object] = {}
    exec(compile(out, "combined.py", "exec"), namespace)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x = torch.randn(2, 4)
    with torch.no_grad():
        module = namespace["Scale"]()  # type: ignore[operator]
        assert module(x) is x  # the kernel's path
        assert torch.equal(module.to(torch.float64)(x.double()), x.double() * 2.0)
        other = namespace["Scale"](factor=3.0)  # type: ignore[operator]
        assert torch.equal(other(x), x * 3.0)


def test_guards_are_left_alone_when_the_signatures_differ():
    # The guard cannot pass the candidate's own argument names on to the original forward.
    candidate = GUARDED.replace("def forward(self, x):", "def forward(self, inp):").replace(
        "return x", "return inp"
    )
    out = with_original_path(candidate, GUARDED_ORIGINAL, "Scale")
    assert out.count("raise NotImplementedError") == 2


def test_the_original_forwards_decorators_wrap_both_paths(monkeypatch):
    """transformers' ``@dynamic_rope_update`` updates the module before each forward: in the
    suggestion it wraps the forward that picks a path, so the kernel's path sees the update too."""
    import torch

    original = textwrap.dedent(
        """
        import functools
        import torch


        def refresh(forward):
            @functools.wraps(forward)
            def wrapper(self, x):
                self.scale.fill_(3.0)  # as a dynamic RoPE recomputes inv_freq
                return forward(self, x)

            return wrapper


        class Table(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = torch.nn.Buffer(torch.ones(4))

            @torch.no_grad()
            @refresh
            def forward(self, x):
                return x * self.scale
        """
    )
    candidate = original.replace("return x * self.scale", "return x * self.scale + 0.0  # the kernel")
    candidate = candidate.replace("    @torch.no_grad()\n    @refresh\n", "")
    out = with_original_path(candidate, original, "Table")
    cls = next(n for n in ast.parse(out).body if isinstance(n, ast.ClassDef))
    methods = {
        f.name: [ast.unparse(d) for d in f.decorator_list] for f in cls.body if isinstance(f, ast.FunctionDef)
    }
    assert methods["forward"] == ["torch.no_grad()", "refresh"]
    assert methods[EAGER] == [] and methods[TRITON] == []
    namespace: dict[str, object] = {}
    exec(compile(out, "combined.py", "exec"), namespace)
    x = torch.ones(2, 4, requires_grad=True)
    for interpret in ("0", "1"):
        monkeypatch.setenv("TRITON_INTERPRET", interpret)
        module = namespace["Table"]()  # type: ignore[operator]
        y = module(x)
        assert torch.equal(y, torch.full((2, 4), 3.0)) and not y.requires_grad
