"""runners.apply: suggestions whose helpers never clash, and files that stay the same file."""

from __future__ import annotations

import textwrap

import pytest

from runners.apply import (
    ApplyError,
    ClassEdit,
    applied,
    check_applied,
    check_applied_together,
    unique_helpers,
)

FILE = textwrap.dedent(
    """\
    import torch
    from torch import nn

    SCALE = 2.0


    def helper(x):
        return x * SCALE


    class RMSNorm(nn.Module):
        def forward(self, x):
            return helper(x)


    class GeGLU(nn.Module):
        def forward(self, x):
            return helper(x) + 1
    """
)


def suggestion(cls: str, factor: float) -> str:
    """What a generator writes: module-level helpers every class's suggestion names alike."""
    return textwrap.dedent(
        f"""\
        import torch
        import torch.nn as nn


        def _launch_config(n):  # the same name in every suggestion
            return {{"factor": {factor}, "n": n}}


        _CACHE = {{}}
        _LO, _HI = 0, 1  # a tuple target: both renamed


        class {cls}(nn.Module):
            def forward(self, x, factor=None):
                cfg = _launch_config(x.numel())
                _CACHE[cfg["n"]] = cfg
                return x * cfg["factor"] + _launch_config(n=1)["n"] * 0
        """
    )


def lines_of(source: str, cls: str) -> tuple[int, int]:
    import ast

    node = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == cls)
    return node.lineno, node.end_lineno or node.lineno


def test_helpers_are_named_for_their_class_and_attributes_and_keywords_are_left_alone():
    out = unique_helpers(suggestion("RMSNorm", 3.0), "RMSNorm", FILE)
    assert "def _launch_config_RMSNorm(n):  # the same name in every suggestion" in out
    assert "_LO_RMSNorm, _HI_RMSNorm = 0, 1" in out
    assert "_CACHE_RMSNorm = {}" in out and '_CACHE_RMSNorm[cfg["n"]]' in out
    assert "_launch_config_RMSNorm(n=1)" in out  # the call renamed, its keyword not
    assert "class RMSNorm(nn.Module):" in out and "import torch.nn as nn" in out


def test_two_suggestions_applied_to_one_file_keep_their_own_helpers():
    """Without unique names the second suggestion's _launch_config would serve both classes."""
    import torch

    text = FILE
    for cls, factor in (("RMSNorm", 3.0), ("GeGLU", 5.0)):
        start, end = lines_of(text, cls)
        text = check_applied(text, start, end, unique_helpers(suggestion(cls, factor), cls, text), cls)
    namespace: dict[str, object] = {}
    exec(compile(text, "models.py", "exec"), namespace)
    x = torch.ones(4)
    assert torch.equal(namespace["RMSNorm"]()(x), x * 3.0)  # type: ignore[operator]
    assert torch.equal(namespace["GeGLU"]()(x), x * 5.0)  # type: ignore[operator]
    assert namespace["helper"](x).tolist() == [2.0] * 4  # type: ignore[operator]


def test_a_name_the_file_already_uses_is_refused():
    taken = FILE + "\n\ndef _launch_config_RMSNorm():\n    pass\n"
    with pytest.raises(ApplyError, match="already defines _launch_config_RMSNorm"):
        unique_helpers(suggestion("RMSNorm", 3.0), "RMSNorm", taken)


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ("def helper(x):\n    return x\n", "rebinds helper"),
        ("SCALE = 3.0\n", "rebinds SCALE"),
        ("import numpy as torch\n", "rebinds torch"),
    ],
)
def test_a_suggestion_that_rebinds_a_name_of_the_file_is_refused(extra, fragment):
    start, end = lines_of(FILE, "RMSNorm")
    code = extra + "\n\n" + suggestion("RMSNorm", 3.0)
    with pytest.raises(ApplyError, match=fragment):
        check_applied(FILE, start, end, code, "RMSNorm")


def test_the_same_import_in_another_spelling_is_fine():
    start, end = lines_of(FILE, "RMSNorm")
    code = "import torch.nn as nn\nimport torch\n\n\nclass RMSNorm(nn.Module):\n    pass\n"
    after = check_applied(FILE, start, end, code, "RMSNorm")
    assert after.count("class GeGLU") == 1 and "def helper(x):" in after


def test_applied_replaces_exactly_the_class_lines():
    start, end = lines_of(FILE, "RMSNorm")
    after = applied(FILE, start, end, "class RMSNorm:\n    pass")
    assert after.splitlines()[start - 1 : start + 1] == ["class RMSNorm:", "    pass"]
    assert after.replace("class RMSNorm:\n    pass\n", "") == FILE.replace(
        "class RMSNorm(nn.Module):\n    def forward(self, x):\n        return helper(x)\n", ""
    )


def test_code_that_breaks_the_file_is_refused():
    start, end = lines_of(FILE, "RMSNorm")
    with pytest.raises(ApplyError, match="would not parse"):
        check_applied(FILE, start, end, "class RMSNorm(:\n", "RMSNorm")


def together(*classes: tuple[str, str]) -> list[ClassEdit]:
    """Suggestions (class, code) over FILE's lines of each class."""
    return [ClassEdit(cls, *lines_of(FILE, cls), code) for cls, code in classes]


def own(cls: str, factor: float) -> str:
    return unique_helpers(suggestion(cls, factor), cls, FILE)


def test_suggestions_applied_together_shift_no_line_and_keep_the_rest_of_the_file():
    """Bottom-up: the longer RMSNorm suggestion above does not move GeGLU's lines from under it."""
    import torch

    rms, geglu = own("RMSNorm", 3.0), own("GeGLU", 5.0)
    # In either order: the same file.
    text = check_applied_together(FILE, together(("GeGLU", geglu), ("RMSNorm", rms)))
    assert text == check_applied_together(FILE, together(("RMSNorm", rms), ("GeGLU", geglu)))
    start, end = lines_of(FILE, "GeGLU")
    one_by_one = check_applied(FILE, start, end, geglu, "GeGLU")
    start, end = lines_of(FILE, "RMSNorm")
    assert text == check_applied(one_by_one, start, end, rms, "RMSNorm")
    assert text.count("class RMSNorm") == text.count("class GeGLU") == 1
    assert text.startswith("import torch\nfrom torch import nn\n\nSCALE = 2.0\n")
    namespace: dict[str, object] = {}
    exec(compile(text, "models.py", "exec"), namespace)
    x = torch.ones(4)
    assert torch.equal(namespace["RMSNorm"]()(x), x * 3.0)  # type: ignore[operator]
    assert torch.equal(namespace["GeGLU"]()(x), x * 5.0)  # type: ignore[operator]


def test_suggestions_over_overlapping_lines_are_refused_naming_both():
    rms_start = lines_of(FILE, "RMSNorm")[0]
    geglu_start, geglu_end = lines_of(FILE, "GeGLU")
    wide = ClassEdit("RMSNorm", rms_start, geglu_start, own("RMSNorm", 3.0))  # runs into GeGLU
    with pytest.raises(ApplyError) as caught:
        check_applied_together(FILE, [ClassEdit("GeGLU", geglu_start, geglu_end, own("GeGLU", 5.0)), wide])
    assert str(caught.value) == (
        f"the suggestions for RMSNorm (lines {rms_start}-{geglu_start}) and GeGLU "
        f"(lines {geglu_start}-{geglu_end}) replace overlapping lines"
    )
    assert caught.value.classes == ("RMSNorm", "GeGLU")


@pytest.mark.parametrize(
    ("rms_extra", "geglu_extra", "name"),
    [
        ("_BLOCK = 128\n", "_BLOCK = 128\n", "_BLOCK"),  # the same statement, yet one shared global
        ("import numpy as np\n", "import torch as np\n", "np"),  # one name, two things imported
        ("def tl(x):\n    return x\n", "import triton.language as tl\n", "tl"),
    ],
)
def test_two_suggestions_binding_one_name_are_refused_naming_both(rms_extra, geglu_extra, name):
    """Names no helper renaming reached (written by hand here): the later binding would serve both."""
    rms, geglu = rms_extra + "\n\n" + own("RMSNorm", 3.0), geglu_extra + "\n\n" + own("GeGLU", 5.0)
    with pytest.raises(ApplyError) as caught:
        check_applied_together(FILE, together(("RMSNorm", rms), ("GeGLU", geglu)))
    assert str(caught.value) == (
        f"the suggestion for GeGLU binds {name} (its line 1), and so does the suggestion for RMSNorm "
        "(its line 1): applied together, GeGLU's would replace RMSNorm's"
    )
    assert caught.value.classes == ("RMSNorm", "GeGLU")  # the later one last: the one to leave out


def test_two_suggestions_importing_the_same_thing_are_fine():
    rms = "import triton\nimport triton.language as tl\nimport torch.nn as nn\n\n\n" + own("RMSNorm", 3.0)
    geglu = "import triton\nfrom triton import language as tl\nfrom torch import nn\n\n\n" + own("GeGLU", 5.0)
    text = check_applied_together(FILE, together(("RMSNorm", rms), ("GeGLU", geglu)))
    assert text.count("import triton\n") == 2 and "from triton import language as tl" in text


def test_a_suggestion_that_breaks_the_file_on_its_own_is_named():
    with pytest.raises(
        ApplyError, match=r"^the suggestion for GeGLU: the suggestion's line 1 rebinds SCALE"
    ) as caught:
        check_applied_together(
            FILE, together(("RMSNorm", own("RMSNorm", 3.0)), ("GeGLU", "SCALE = 1.0\n" + own("GeGLU", 5.0)))
        )
    assert caught.value.classes == ("GeGLU",)
