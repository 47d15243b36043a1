"""runners.discover: nn.Module classes found by reading the AST, never by importing."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from runners.discover import (
    DiscoveryError,
    ModuleClass,
    classes_touching,
    find_modules,
    module_level_functions,
)

PROBLEMS = Path(__file__).resolve().parents[1] / "problems"


def names(source: str) -> list[str]:
    return [m.name for m in find_modules(textwrap.dedent(source))]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(
            """
            import torch.nn as nn
            class A(nn.Module):
                pass
            """,
            ["A"],
            id="nn.Module",
        ),
        pytest.param(
            """
            import torch
            class A(torch.nn.Module):
                pass
            """,
            ["A"],
            id="torch.nn.Module",
        ),
        pytest.param(
            """
            import torch.nn
            class A(torch.nn.Module):
                pass
            """,
            ["A"],
            id="import torch.nn binds torch",
        ),
        pytest.param(
            """
            import torch.nn as tnn
            class A(tnn.Module):
                pass
            """,
            ["A"],
            id="import torch.nn as tnn",
        ),
        pytest.param(
            """
            from torch import nn
            class A(nn.Module):
                pass
            """,
            ["A"],
            id="from torch import nn",
        ),
        pytest.param(
            """
            from torch import nn as mynn
            class A(mynn.Module):
                pass
            """,
            ["A"],
            id="from torch import nn as mynn",
        ),
        pytest.param(
            """
            from torch.nn import Module as Base
            class A(Base):
                pass
            """,
            ["A"],
            id="from torch.nn import Module as Base",
        ),
        pytest.param(
            """
            import torch as T
            class A(T.nn.Module):
                pass
            """,
            ["A"],
            id="import torch as T",
        ),
        pytest.param(
            """
            import torch.nn as nn
            class A(nn.Linear):
                pass
            """,
            ["A"],
            id="nn.Linear subclass",
        ),
        pytest.param(
            """
            from torch.nn import Linear
            class A(Linear):
                pass
            """,
            ["A"],
            id="from torch.nn import Linear",
        ),
        pytest.param(
            """
            import torch.nn as nn
            class Child(Parent):
                pass
            class Grandchild(Child):
                pass
            class Parent(nn.Module):
                pass
            """,
            ["Child", "Grandchild", "Parent"],
            id="bases defined later (fixpoint), file order kept",
        ),
        pytest.param(
            """
            import torch
            import torch.nn as nn
            class P(nn.Parameter):
                pass
            class Q(torch.nn.Parameter):
                pass
            class Plain:
                pass
            class Sub(Plain):
                pass
            class Err(ValueError):
                pass
            class M(nn.Module):
                pass
            """,
            ["M"],
            id="Parameter and non-modules excluded",
        ),
        pytest.param(
            """
            from torch.nn import Parameter
            from torch.nn import functional
            class P(Parameter):
                pass
            class F(functional):
                pass
            """,
            [],
            id="from torch.nn import Parameter / lowercase names",
        ),
        pytest.param(
            """
            class Module:
                pass
            class A(Module):
                pass
            class B(nn.Module):
                pass
            """,
            [],
            id="no torch import: nothing is a torch module",
        ),
        pytest.param(
            """
            import torch.nn as nn
            def factory():
                class Inner(nn.Module):
                    pass
                return Inner
            class Outer:
                class Nested(nn.Module):
                    pass
            """,
            [],
            id="only top-level classes",
        ),
    ],
)
def test_find_modules_recognises_bases(source, expected):
    assert names(source) == expected


def test_import_of_a_torch_submodule_binds_torch():
    source = """
    import torch.nn.functional
    class A(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.relu(x)
    """
    assert names(source) == ["A"]


def test_params_and_lines():
    source = textwrap.dedent(
        """\
        import functools
        import torch.nn as nn


        @functools.total_ordering
        @some.decorator(arg=1)
        class Norm(nn.Module):
            def __init__(self, dim, /, eps=1e-6, *args, affine=True, **kwargs):
                super().__init__()

            def forward(self, x, mask=None):
                return x


        class NoInit(nn.Module):
            async def forward(self, *xs):
                return xs
        """
    )
    norm, no_init = find_modules(source)
    assert norm == ModuleClass(
        name="Norm",
        lineno=5,  # the first decorator, not the `class` line (7)
        end_lineno=12,
        bases=("nn.Module",),
        init_params=("dim", "eps", "affine", "*args", "**kwargs"),
        forward_params=("x", "mask"),
    )
    assert no_init.name == "NoInit"
    assert (no_init.lineno, no_init.end_lineno) == (15, 17)
    assert no_init.init_params == ()
    assert no_init.forward_params == ("*xs",)


def test_layers_problem_file():
    source = (PROBLEMS / "layers.py").read_text()
    found = {m.name: m for m in find_modules(source, "layers.py")}
    assert list(found) == ["RMSNorm", "GatedMLP", "Block", "NeedsConfig"]
    assert found["RMSNorm"].init_params == ("dim", "eps")
    assert found["RMSNorm"].forward_params == ("x",)
    assert found["GatedMLP"].bases == ("Base",)
    assert found["GatedMLP"].init_params == ("hidden_size", "intermediate_size")
    assert found["Block"].bases == ("GatedMLP",)
    assert found["Block"].init_params == ()  # inherited, not declared
    assert found["NeedsConfig"].init_params == ("config",)
    assert module_level_functions(source) == {"helper"}


@pytest.mark.parametrize("problem", ["add_relu.py", "softmax.py", "matmul.py"])
def test_kernelbench_problem_files(problem):
    source = (PROBLEMS / problem).read_text()
    assert [m.name for m in find_modules(source)] == ["Model"]
    assert {"get_inputs", "get_init_inputs"} <= module_level_functions(source)


def test_syntax_error_raises_discovery_error_with_line():
    source = "import torch\n\nclass A(torch.nn.Module):\n    def forward(self, x)\n        return x\n"
    with pytest.raises(DiscoveryError, match=r"^bad\.py:4: syntax error: ") as info:
        find_modules(source, "bad.py")
    assert isinstance(info.value, ValueError)


def test_classes_touching_maps_lines_to_classes():
    source = (PROBLEMS / "layers.py").read_text()
    modules = find_modules(source)
    spans = {m.name: (m.lineno, m.end_lineno) for m in modules}
    assert spans["RMSNorm"] == (8, 15)
    assert spans["Block"] == (29, 30)
    assert spans["NeedsConfig"] == (33, 41)
    assert classes_touching(modules, []) == []
    assert classes_touching(modules, [1, 2, 3]) == []  # imports only
    assert classes_touching(modules, [8]) == ["RMSNorm"]  # first line
    assert classes_touching(modules, [15]) == ["RMSNorm"]  # last line
    assert classes_touching(modules, [16, 17]) == []  # blank lines between classes
    assert classes_touching(modules, [30]) == ["Block"]
    assert classes_touching(modules, [31, 32]) == []
    assert classes_touching(modules, [44]) == []  # helper() is no class
    assert classes_touching(modules, [41, 12, 41, 9]) == ["RMSNorm", "NeedsConfig"]  # file order
    assert classes_touching(modules, range(1, 100)) == [
        "RMSNorm",
        "GatedMLP",
        "Block",
        "NeedsConfig",
    ]


def test_added_lines_follow_the_head_side_of_each_hunk():
    from runners.discover import added_lines

    patch = (
        "@@ -1,3 +1,4 @@\n import torch\n+import triton\n class A:\n-    x = 1\n+    x = 2\n"
        "@@ -20,2 +21,3 @@ class B:\n     def f(self):\n+        pass\n         return 1\n"
        "\\ No newline at end of file\n"
    )
    assert added_lines(patch) == [2, 4, 22]
    assert added_lines(None) == []
    assert added_lines("@@ -0,0 +1,2 @@\n+a\n+b\n") == [1, 2]


def test_a_base_class_imported_from_another_file_of_the_repository_is_followed(tmp_path):
    """``GPT2Block(GradientCheckpointingLayer)``: the base lives in another file. Discovery reads
    that file (relative and absolute imports, through a chain of files), never imports it; a base
    that is no module there, a missing file and a cycle leave the class out quietly."""
    from runners.pipeline import file_resolver

    pkg = tmp_path / "src" / "lib"
    (pkg / "nn").mkdir(parents=True)
    for folder in (pkg, pkg / "nn"):
        (folder / "__init__.py").write_text("")
    (pkg / "nn" / "base.py").write_text("from torch import nn\n\n\nclass Layer(nn.Module):\n    pass\n")
    (pkg / "nn" / "mid.py").write_text(
        "from .base import Layer as L\n\n\nclass Ckpt(L):\n    pass\n\n\nclass Plain:\n    pass\n"
    )
    (pkg / "cycle.py").write_text("from lib.model import Block\n")
    source = (
        "from lib.nn.mid import Ckpt, Plain\nfrom .cycle import Block as Other\n"
        "from .missing import Gone\n\n\n"
        "class Block(Ckpt):\n    def forward(self, x):\n        return x\n\n\n"
        "class NotOne(Plain):\n    pass\n\n\nclass Loop(Other):\n    pass\n\n\nclass Lost(Gone):\n    pass\n"
    )
    model = pkg / "model.py"
    model.write_text(source)
    assert [m.name for m in find_modules(source, str(model))] == []  # reading this file alone
    found = find_modules(source, str(model), file_resolver(model, tmp_path))
    # Loop: cycle.py re-exports this file's Block; following it back ends at the depth limit.
    assert [m.name for m in found] == ["Block", "Loop"]
