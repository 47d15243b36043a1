"""Names the trace gives never become code unless they are names.

The template's trace runs the module's own code in a sandbox, and what comes back is the sandbox's
word: a module can name its attributes anything (``setattr(self, "k if print() else 0", 3.0)``), and
code that owns its runner can forge the whole description. The generated module writes node names
as variables, forward's argument names as arguments and attribute paths as ``self.`` expressions,
so before anything is written each must be a name (or a path of names and container indices); a
trace with any other is declined, and nothing of it is written.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from runners import verify
from runners.generators.base import GeneratorDeclined
from runners.generators.template import TemplateGenerator, Unsupported
from runners.generators.template.ir import attribute_path, check_names, module_path, on_self
from runners.pipeline import problems_for
from tests.runners.test_template_reductions import _generate, _modules, fresh_python

INJECTED = "scale) if print('injected') is None else float(0"

EVIL = f"""
import torch
from torch import nn

NAME = {INJECTED!r}


class Evil(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0
        setattr(self, NAME, 3.0)  # an attribute any name can have

    def forward(self, x):
        return x * getattr(self, NAME)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
"""


def test_an_attribute_named_as_code_is_declined_and_never_written(tmp_path: Path) -> None:
    path = tmp_path / "evil.py"
    path.write_text(textwrap.dedent(EVIL), encoding="utf-8")
    (problem,), _ = problems_for(str(path), str(tmp_path), "Evil")
    req = {"device": "cpu", "file": problem.file, "root": str(tmp_path), "class_name": "Evil", "dtype": None}
    problem.build = verify.prepare(req)["build"]
    with pytest.raises(GeneratorDeclined, match=r"^template: the trace names .*not an attribute path$"):
        TemplateGenerator().generate(problem, 1)


def _trace(node: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A forged trace: ``x`` in, ``node`` (an op of ``x``), out."""
    placeholder = {"name": "x", "op": "placeholder", "target": "x", "shape": [4], "dtype": "float32"}
    output = {"name": "output", "op": "output", "args": [{"node": node["name"]}], "kwargs": {}}
    return {"ok": True, "nodes": [placeholder, node, output], **extra}


def _mul(*args: Any, name: str = "mul", **kwargs: Any) -> dict[str, Any]:
    return {
        "name": name,
        "op": "call_function",
        "target": "operator.mul",
        "args": list(args),
        "kwargs": kwargs,
    }


@pytest.mark.parametrize(
    "forged",
    [
        _trace(_mul({"node": "x"}, {"attr": INJECTED, "value": 3.0})),
        _trace(_mul({"node": "x"}, other={"derived": "k + __import__('os').getpid()", "value": 1.0})),
        _trace(_mul({"node": "x"}, [{"nested": {"attr": "k\n", "value": 1}}])),
        _trace(_mul({"node": "x"}, 2.0, name="mul = __import__('os')")),
        _trace(_mul({"node": "x; import os"}, 2.0)),
        _trace(_mul({"node": "x"}, {"attr": "norm.0", "value": 1.0})),  # no attribute last
        _trace(_mul({"node": "x"}, {"attr": "class", "value": 1.0})),  # a keyword
        _trace(_mul({"node": "x"}, {"attr": "ｅps", "value": 1.0})),  # not ASCII
        _trace(
            {"name": "pool", "op": "call_module", "target": 'pool").__class__("', "args": [{"node": "x"}]}
        ),
        _trace({"name": "w", "op": "get_attr", "target": "weight[0]", "args": []}),
        _trace(
            {
                "name": "norm",
                "op": "call_module",
                "target": "norm",
                "args": [{"node": "x"}],
                "params": {"weight": {"target": "norm.weight or 1"}},
            }
        ),
        _trace(_mul({"node": "x"}, 2.0), settings=[{"path": "flag or True", "value": True}]),
        {"nodes": [{"name": "x", "op": "placeholder", "target": "x=print()", "shape": [4]}]},
    ],
)
def test_a_forged_name_anywhere_in_the_trace_is_refused(forged: dict[str, Any]) -> None:
    with pytest.raises(Unsupported, match=r"^the trace names "):
        check_names(forged)


def test_the_names_modules_really_have_pass() -> None:
    check_names(
        _trace(
            {
                "name": "net_1",
                "op": "call_module",
                "target": "blocks.0.net.1",
                "args": [{"node": "x"}, {"attr": "blocks.0.eps", "value": 1e-5}],
                "kwargs": {"scale": {"derived": "_scale", "value": 2.0}},
                "params": {"weight": {"target": "blocks.0.net.1.weight"}},
            },
            settings=[{"path": "norm.approximate", "value": "tanh"}],
        )
    )
    check_names({"nodes": [{"name": "args", "op": "placeholder", "target": "*args"}]})
    assert module_path("net.1") == "net.1"
    assert attribute_path("blocks.0.eps") == "blocks.0.eps"
    assert on_self("blocks.0.eps") == 'self.get_submodule("blocks.0").eps'
    assert on_self("norm.eps") == "self.norm.eps"


@pytest.mark.parametrize("path", [INJECTED, "eps)", "0", "net.1", 'a").b', "", "a..b", None])
def test_on_self_writes_attribute_paths_only(path: Any) -> None:
    with pytest.raises(Unsupported, match=r"^the trace names "):
        on_self(path)


TANH_FIRST = """
class M(nn.Module):
    def forward(self, x):
        return torch.tanh(x)
"""


@fresh_python
def test_a_kernel_named_after_tanh_does_not_hide_the_tanh_helper(tmp_path):
    """The kernel of ``tanh(x)`` is ``_tanh_kernel``, and its op ``_tanh``: that was the name of the
    jitted helper the kernel's body calls, which the op then replaced (the launch failed)."""
    source, name, _ = _generate(tmp_path, TANH_FIRST, "[torch.randn(4, 33)]")
    _, new = _modules(source)
    x = torch.randn(4, 33)
    with torch.no_grad():
        assert (new(x) - torch.tanh(x)).abs().max().item() < 1e-5, name
