"""``/kernelize`` comments: what is a command, what it says, and what the user is told when it is wrong."""

from __future__ import annotations

import dataclasses
import keyword
import shlex
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.commands import ACTIONS, DTYPES, OPTIONS, Command, CommandError, Target, help_text, parse

GENERATORS = ("files", "kernelllm", "openai")


def run(*targets: Target, line: str, **options: Any) -> Command:
    return Command("run", targets=targets, line=line, **options)


# ---------------------------------------------------------------- valid commands

VALID = [
    ("/kernelize", Command("run", line="/kernelize")),
    ("/kernelize run", Command("run", line="/kernelize run")),
    ("/kernelize help", Command("help", line="/kernelize help")),
    ("/kernelize status", Command("status", line="/kernelize status")),
    ("/kernelize cancel", Command("cancel", line="/kernelize cancel")),
    ("/kernelize stats", Command("stats", line="/kernelize stats")),
    ("/kernelize HELP", Command("help", line="/kernelize HELP")),
    ("/kernelize apply RMSNorm", Command("apply", (Target("", "RMSNorm"),), line="/kernelize apply RMSNorm")),
    (
        "/kernelize Apply ./models/layers.py::RMSNorm",
        Command(
            "apply",
            (Target("models/layers.py", "RMSNorm"),),
            line="/kernelize Apply ./models/layers.py::RMSNorm",
        ),
    ),
    (
        "/kernelize models/layers.py::RMSNorm",
        run(Target("models/layers.py", "RMSNorm"), line="/kernelize models/layers.py::RMSNorm"),
    ),
    (
        "/kernelize run models/layers.py",
        run(Target("models/layers.py", None), line="/kernelize run models/layers.py"),
    ),
    (
        "/kernelize a.py::A b/c.py",
        run(Target("a.py", "A"), Target("b/c.py", None), line="/kernelize a.py::A b/c.py"),
    ),
    (
        "/kernelize ./models//layers.py::RMSNorm",
        run(Target("models/layers.py", "RMSNorm"), line="/kernelize ./models//layers.py::RMSNorm"),
    ),
    (
        "/kernelize 'my models/layers.py'::Norm",
        run(Target("my models/layers.py", "Norm"), line="/kernelize 'my models/layers.py'::Norm"),
    ),
    (
        "/kernelize a.py --generator files --generator openai --samples 4 --dtype float16 --min-speedup 1.2",
        run(
            Target("a.py"),
            generators=("files", "openai"),
            samples=4,
            dtype="float16",
            min_speedup=1.2,
            line="/kernelize a.py --generator files --generator openai --samples 4 --dtype float16 "
            "--min-speedup 1.2",
        ),
    ),
    (
        "/kernelize --generator=openai --generator=files --samples=16 --dtype=bfloat16 --min-speedup=1",
        run(
            generators=("openai", "files"),
            samples=16,
            dtype="bfloat16",
            min_speedup=1.0,
            line="/kernelize --generator=openai --generator=files --samples=16 --dtype=bfloat16 "
            "--min-speedup=1",
        ),
    ),
    (
        "/kernelize --samples 2 a.py::A",
        run(Target("a.py", "A"), samples=2, line="/kernelize --samples 2 a.py::A"),
    ),
    (
        "/kernelize run --dtype float32 a.py::A --min-speedup 1e1 b.py",
        run(
            Target("a.py", "A"),
            Target("b.py"),
            dtype="float32",
            min_speedup=10.0,
            line="/kernelize run --dtype float32 a.py::A --min-speedup 1e1 b.py",
        ),
    ),
    ("/KerNelize status", Command("status", line="/KerNelize status")),
    ("   /kernelize\t status  ", Command("status", line="/kernelize\t status")),
    ("Thanks!\n\n/kernelize help\n", Command("help", line="/kernelize help")),
    ("first line\r\n/kernelize stats\r\nlast", Command("stats", line="/kernelize stats")),
    ("/kernelize status\n/kernelize cancel", Command("status", line="/kernelize status")),
    ("/kernelize help\n/kernelize --sampels 2", Command("help", line="/kernelize help")),
    ("```\n/kernelize cancel\n```\n/kernelize status", Command("status", line="/kernelize status")),
    ("> /kernelize cancel\n\n/kernelize status", Command("status", line="/kernelize status")),
    # A fence closes only with the same character, at least as long, and nothing after it.
    ("````\n```\n/kernelize cancel\n````\n/kernelize help", Command("help", line="/kernelize help")),
    ("```py\n/kernelize cancel\n``` x\n/kernelize stats\n```\n/kernelize", Command("run", line="/kernelize")),
    # A run of backticks with backticks after it is inline code, not a fence.
    ("``` `x` ```\n/kernelize help", Command("help", line="/kernelize help")),
]


@pytest.mark.parametrize(("body", "expected"), VALID, ids=[b for b, _ in VALID])
def test_valid_commands(body: str, expected: Command) -> None:
    assert parse(body, GENERATORS) == expected


NOT_COMMANDS = [
    None,
    "",
    "   \n\n",
    "Looks good to me",
    "/kernelizer",
    "/kernelize-foo run",
    "/kernelize.",
    "please run /kernelize on this",
    "`/kernelize`",
    "- /kernelize",
    "```\n/kernelize\n```",
    "```python\n/kernelize cancel\n```",
    "~~~\n/kernelize\n~~~",
    "~~~~~\n/kernelize\n~~~\n/kernelize\n",  # never closed: the rest of the comment is code
    "```\n/kernelize\n~~~\n/kernelize\n",  # a tilde line does not close a backtick fence
    "  ```\n  /kernelize\n  ```",
    "> /kernelize",
    ">/kernelize help",
    "  > /kernelize",
    "> > /kernelize cancel",
]


@pytest.mark.parametrize("body", NOT_COMMANDS)
def test_not_commands(body: str | None) -> None:
    assert parse(body, GENERATORS) is None


# ---------------------------------------------------------------- errors

ERRORS = [
    # (command line, the word pointed out, text the message must contain)
    ("/kernelize run2", "run2", "(did you mean `run`?)"),
    ("/kernelize models/layers", "models/layers", "not a .py file"),
    ("/kernelize please", "please", "unknown action `please`"),
    ("/kernelize a.py help", "help", "must come right after"),
    ("/kernelize a.py models", "models", "is not a target"),
    ("/kernelize --sampels 2", "--sampels", "unknown option `--sampels` (did you mean `--samples`?)"),
    ("/kernelize --sampels=2", "--sampels", "(did you mean `--samples`?)"),
    ("/kernelize -s 2", "-s", "unknown option `-s`"),
    ("/kernelize --samples", "--samples", "needs a value: a whole number from 1 to 16"),
    ("/kernelize --samples --dtype float16", "--samples", "needs a value"),
    ("/kernelize --dtype=", "--dtype", "needs a value: one of float32, float16, bfloat16"),
    ("/kernelize --generator", "--generator", "the generators are files, kernelllm, openai"),
    ("/kernelize --samples two", "two", "must be a whole number from 1 to 16, not `two`"),
    ("/kernelize --samples 2.5", "2.5", "whole number"),
    ("/kernelize --samples=0", "0", "from 1 to 16"),
    ("/kernelize --samples 17", "17", "from 1 to 16"),
    ("/kernelize --samples -1", "-1", "from 1 to 16"),
    ("/kernelize --samples ３", "３", "whole number"),  # a full-width digit: int() would take it
    ("/kernelize --dtype float64", "float64", "must be one of float32, float16, bfloat16, not `float64`"),
    ("/kernelize --dtype bfloat", "bfloat", "(did you mean `bfloat16`?)"),
    ("/kernelize --min-speedup nan", "nan", "finite number of at least 1.0"),
    ("/kernelize --min-speedup inf", "inf", "finite number"),
    ("/kernelize --min-speedup=-inf", "-inf", "finite number"),
    ("/kernelize --min-speedup 1e999", "1e999", "finite number"),
    ("/kernelize --min-speedup 0.9", "0.9", "at least 1.0, not `0.9`"),
    ("/kernelize --min-speedup fast", "fast", "finite number"),
    ("/kernelize --samples 2 --samples 3", "--samples", "`--samples` is given twice"),
    ("/kernelize --dtype float16 --dtype=float16", "--dtype", "given twice"),
    ("/kernelize --min-speedup 1.1 a.py --min-speedup 1.2", "--min-speedup", "given twice"),
    ("/kernelize --generator files --generator=files", "files", "generator `files` is given twice"),
    ("/kernelize --generator opnai", "opnai", "unknown generator `opnai` (did you mean `openai`?)"),
    ("/kernelize --generator gpt", "gpt", "the generators are files, kernelllm, openai"),
    ("/kernelize a.py::A a.py::A", "a.py::A", "given twice"),
    ("/kernelize ../secrets.py", "../secrets.py", "leaves the repository"),
    ("/kernelize models/../../x.py::A", "models/../../x.py::A", "leaves the repository"),
    ("/kernelize /etc/x.py", "/etc/x.py", "is absolute"),
    ("/kernelize C:/x.py", "C:/x.py", "is absolute"),
    ("/kernelize models\\\\x.py", "models\\x.py", "backslash"),
    ("/kernelize a.py::1Norm", "a.py::1Norm", "`1Norm` in `a.py::1Norm` is not a Python class name"),
    ("/kernelize a.py::class", "a.py::class", "not a Python class name"),
    ("/kernelize a.py::A.B", "a.py::A.B", "not a Python class name"),
    ("/kernelize a.py::", "a.py::", "no class name"),
    ("/kernelize ::A", "::A", "no path"),
    ("/kernelize a.txt::A", "a.txt::A", "not a .py file"),
    ("/kernelize help extra", "extra", "`help` takes no targets or options"),
    ("/kernelize status --samples 2", "--samples", "`status` takes no targets or options"),
    ("/kernelize cancel a.py", "a.py", "takes no targets"),
    ("/kernelize stats now", "now", "takes no targets"),
    ("/kernelize apply", "apply", "`apply` needs the class whose suggestion to push"),
    ("/kernelize apply models/layers.py", "models/layers.py", "names a file; name one class"),
    ("/kernelize apply 1Norm", "1Norm", "`1Norm` is not a Python class name"),
    ("/kernelize apply class", "class", "not a Python class name"),
    ("/kernelize apply a.py::", "a.py::", "no class name"),
    ("/kernelize apply RMSNorm GatedMLP", "GatedMLP", "`apply` takes one class; remove `GatedMLP`"),
    ("/kernelize apply RMSNorm --samples 2", "--samples", "`apply` takes one class"),
    ("/kernelize apply --samples 2", "--samples", "`apply` takes no options"),
    ("/kernelize apply ../x.py::A", "../x.py::A", "leaves the repository"),
    ("/kernelize a.py 'b.py", "'b.py", "unbalanced ' quote"),
    ('/kernelize --dtype "float16', '"float16', 'unbalanced " quote'),
    ('/kernelize "a.py" "b', '"b', "unbalanced"),
    ("/kernelize a.py \\", "\\", "backslash at the end"),
    ("/kernelize " + "a" * 1000, "/kernelize", "command too long (1,011 characters; at most 1,000)"),
    ("/KERNELIZE " + "a" * 1000, "/KERNELIZE", "command too long"),
]


@pytest.mark.parametrize(("line", "word", "says"), ERRORS, ids=[line[:60] for line, _, _ in ERRORS])
def test_errors_point_at_the_word(line: str, word: str, says: str) -> None:
    with pytest.raises(CommandError) as caught:
        parse(f"Please try this:\n{line}\nThanks", GENERATORS)
    assert caught.value.word == word
    assert says in caught.value.message
    assert len(caught.value.message.splitlines()) == 1


def test_a_long_word_is_clipped_and_mentions_stay_in_code() -> None:
    with pytest.raises(CommandError) as caught:
        parse("/kernelize @org/team " + "x" * 200, GENERATORS)
    assert caught.value.word == "@org/team"
    assert "`@org/team`" in caught.value.message
    with pytest.raises(CommandError) as caught:
        parse("/kernelize " + "y" * 200 + ".txt", GENERATORS)
    assert len(caught.value.message) < 250 and "…" in caught.value.message


def test_backticks_in_a_word_keep_it_in_one_code_span() -> None:
    with pytest.raises(CommandError) as caught:
        parse("/kernelize a`b", GENERATORS)
    assert "``a`b``" in caught.value.message


def test_a_command_line_of_exactly_the_limit_is_read() -> None:
    line = "/kernelize a.py::" + "A" * (1000 - len("/kernelize a.py::"))
    command = parse(line, GENERATORS)
    assert command is not None and command.targets[0].class_name == "A" * 983


def test_generator_names_come_from_the_caller() -> None:
    command = parse("/kernelize --generator mine", ["mine"])
    assert command is not None and command.generators == ("mine",)
    with pytest.raises(CommandError) as caught:
        parse("/kernelize --generator files", [])
    assert caught.value.word == "files" and "no generators are available" in caught.value.message


# ---------------------------------------------------------------- the parts of a command


def test_overrides_hold_only_the_options_given() -> None:
    assert Command("run").overrides() == {}
    assert Command("run", samples=2).overrides() == {"samples": 2}
    command = parse(
        "/kernelize a.py --generator openai --generator files --dtype float16 --min-speedup 1.5", GENERATORS
    )
    assert command is not None
    assert command.overrides() == {
        "generators": ["openai", "files"],
        "dtypes": ["float16"],
        "min_speedup": 1.5,
    }


def test_a_target_matches_its_class_or_its_whole_file() -> None:
    one, whole = Target("models/layers.py", "RMSNorm"), Target("models/layers.py", None)
    assert one.matches("models/layers.py", "RMSNorm")
    assert not one.matches("models/layers.py", "GatedMLP")
    assert not one.matches("other/layers.py", "RMSNorm")
    assert whole.matches("models/layers.py", "GatedMLP")
    assert not whole.matches("models/layers.pyi", "GatedMLP")


# ---------------------------------------------------------------- help


def test_help_lists_the_grammar_options_and_generators() -> None:
    text = help_text(GENERATORS)
    for word in (
        "/kernelize help",
        "/kernelize status",
        "/kernelize cancel",
        "/kernelize stats",
        "[run]",
        "/kernelize apply CLASS",
        "not for a branch in a fork",
    ):
        assert word in text
    for option in OPTIONS:
        assert option in text
    for name in (*GENERATORS, *DTYPES, "1 to 16", "at least 1.0", "path/to/file.py::Class"):
        assert name in text
    assert "write, maintain or admin permission" in text
    assert "Current configuration" not in text and "Could not read" not in text


def test_help_shows_the_config_summary_verbatim() -> None:
    summary = "| key | value |\n|---|---|\n| samples | 3 |\n| generators | `files` |"
    text = help_text(GENERATORS, config_summary=summary)
    assert summary in text
    assert text.index("Current configuration") < text.index(summary)


def test_help_for_an_error_points_at_the_word_first() -> None:
    with pytest.raises(CommandError) as caught:
        parse("/kernelize --sampels 2", GENERATORS)
    text = help_text(GENERATORS, error=caught.value)
    first = text.splitlines()[0]
    assert "`--sampels`" in first and caught.value.message in first
    assert "--samples N" in text


def test_help_without_generators_says_so() -> None:
    assert "no generators are available" in help_text([])


# ---------------------------------------------------------------- properties

ALPHABET = [
    "/kernelize",
    "/KERNELIZE",
    "/kernelizer",
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "\r",
    *OPTIONS,
    "--",
    "-",
    "=",
    "'",
    '"',
    "\\",
    "`",
    "```",
    "~~~",
    ">",
    "run",
    "help",
    "status",
    "cancel",
    "stats",
    "files",
    "openai",
    "float16",
    "a.py",
    "models/x.py",
    "::",
    "Norm",
    "..",
    "/",
    ".",
    "1",
    "16",
    "1.5",
    "nan",
    "inf",
    "@",
    "é",
    "\x00",
    "\u2028",
]
BODIES = st.one_of(
    st.text(),
    st.lists(st.sampled_from(ALPHABET), max_size=40).map("".join),
    st.lists(st.sampled_from(ALPHABET), max_size=20).map(lambda parts: "/kernelize " + "".join(parts)),
)


@settings(max_examples=300, deadline=None)
@given(BODIES)
def test_any_text_gives_none_a_command_or_a_command_error(body: str) -> None:
    try:
        command = parse(body, GENERATORS)
    except CommandError as exc:
        assert isinstance(exc.word, str) and exc.message
        assert len(exc.message.splitlines()) == 1
        assert "Could not read the command" in help_text(GENERATORS, error=exc)
        return
    if command is None:
        return
    assert command.line.lower().startswith("/kernelize")
    assert set(command.generators) <= set(GENERATORS)
    assert command.samples is None or 1 <= command.samples <= 16
    for target in command.targets:
        assert target.path.endswith(".py") and ".." not in target.path.split("/")
        assert not target.path.startswith("/")


SEGMENTS = st.from_regex(r"[A-Za-z0-9_é][A-Za-z0-9_é .-]{0,8}", fullmatch=True).filter(
    lambda s: s not in (".", "..")
)
CLASSES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True).filter(
    lambda s: not keyword.iskeyword(s)
)
PATHS = st.builds(
    lambda dirs, stem: "/".join([*dirs, stem + ".py"]), st.lists(SEGMENTS, max_size=3), SEGMENTS
)
TARGETS = st.builds(Target, PATHS, st.none() | CLASSES)


@st.composite
def commands(draw: st.DrawFn) -> Command:
    action = draw(st.sampled_from(ACTIONS))
    if action == "apply":
        target = draw(st.builds(Target, st.just("") | PATHS, CLASSES))
        return Command(action, targets=(target,))
    if action != "run":
        return Command(action)
    return Command(
        "run",
        targets=tuple(draw(st.lists(TARGETS, max_size=4, unique=True))),
        generators=tuple(draw(st.lists(st.sampled_from(GENERATORS), unique=True))),
        samples=draw(st.none() | st.integers(1, 16)),
        dtype=draw(st.none() | st.sampled_from(DTYPES)),
        min_speedup=draw(st.none() | st.floats(min_value=1.0, allow_nan=False, allow_infinity=False)),
    )


def _spelled(t: Target) -> str:
    """A target as a comment writes it: ``path``, ``path::Class``, or (``apply``) ``Class`` alone."""
    if not t.path:
        return str(t.class_name)
    return shlex.quote(t.path) + (f"::{t.class_name}" if t.class_name else "")


@st.composite
def render(draw: st.DrawFn, command: Command) -> str:
    """One of the ways to write ``command``: the word's case, ``run`` or not, either option form, and
    options and targets in any order."""
    word = draw(st.sampled_from(["/kernelize", "/Kernelize", "/KERNELIZE"]))
    head = [word]
    if command.action != "run" or draw(st.booleans()):
        head.append(command.action)
    parts = [_spelled(t) for t in command.targets]
    values = [("--generator", g) for g in command.generators]
    values += [
        (name, repr(value))
        for name, value in [("--samples", command.samples), ("--min-speedup", command.min_speedup)]
        if value is not None
    ]
    values += [("--dtype", command.dtype)] if command.dtype is not None else []
    for name, value in values:
        if draw(st.booleans()):
            parts.append(shlex.quote(f"{name}={value}"))
        else:
            parts.append(f"{name} {shlex.quote(value)}")
    # Shuffle, then put the targets and the generators back in their order into the places they landed.
    order = draw(st.permutations(range(len(parts))))
    n_targets, n_generators = len(command.targets), len(command.generators)
    for kept in (range(n_targets), range(n_targets, n_targets + n_generators)):
        in_order = iter(kept)
        order = [next(in_order) if i in kept else i for i in order]
    spaces = draw(st.sampled_from([" ", "  ", "\t"]))
    return spaces.join(head + [parts[i] for i in order])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_rendered_command_parses_back_equal(data: st.DataObject) -> None:
    command = data.draw(commands())
    line = data.draw(render(command))
    before = data.draw(
        st.sampled_from(["", "Trying again:\n", "> /kernelize cancel\n\n", "```\n/kernelize\n```\n"])
    )
    assert parse(before + line + "\n", GENERATORS) == dataclasses.replace(command, line=line)
