"""``/kernelize`` commands in pull request comments: the parser and the help reply.

Pure: a comment body in, a ``Command`` (or ``None``, or a ``CommandError`` for the
user) out. The generator names come from the caller, so this module never imports
the engine. The grammar is in ``help_text`` (``templates/comments/help.md.j2``).
"""

from __future__ import annotations

import difflib
import keyword
import math
import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from runners.render import environment

Action = Literal["run", "help", "status", "cancel", "stats", "apply"]
ACTIONS: tuple[Action, ...] = get_args(Action)
_ACTION: dict[str, Action] = {a: a for a in ACTIONS}
COMMAND_WORD = "/kernelize"
MAX_LINE = 1000  # characters; a real command is well under 200, and shlex on a long line is wasted work
DTYPES = ("float32", "float16", "bfloat16")
SAMPLES = (1, 16)  # candidates per generator, both ends included
MIN_SPEEDUP = 1.0  # below 1.0 a slower kernel would count as faster
OPTIONS = ("--generator", "--samples", "--dtype", "--min-speedup")
_SHOWN_WORD = 60  # characters of a user's word quoted back in a message
_TARGET_SHAPE = "path/to/file.py or path/to/file.py::Class"
_TARGET_FORM = f"a target is {_TARGET_SHAPE}, relative to the repository root"
_APPLY_FORM = "name one class: `Class`, or `path/to/file.py::Class` when two files have one of that name"

# A command line: the word at the start of the line (after spaces or tabs), then a space, a tab or nothing.
_COMMAND_RE = re.compile(r"[ \t]*/kernelize(?=[ \t]|$)", re.IGNORECASE)
# A fence opens at any indentation (in a list item it may be indented past the 3 spaces CommonMark
# allows at top level): treating a literal ``` as a fence can hide a command, never run one from code.
_FENCE_RE = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)")
_DIGITS_RE = re.compile(r"[0-9]+")
_NUMBER_RE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(nan|inf|infinity)", re.I)


class CommandError(ValueError):
    """A command that cannot be read: ``word`` is the token at fault, ``message`` one line on what is
    wrong and what is allowed (markdown: the user's words are in backticks)."""

    def __init__(self, word: str, message: str) -> None:
        super().__init__(message)
        self.word = word
        self.message = message


@dataclass(frozen=True)
class Target:
    """``path/to/file.py::Class``, or the whole file when ``class_name`` is None. ``apply``'s target
    may name the class alone: then ``path`` is empty (any file)."""

    path: str
    class_name: str | None = None

    def matches(self, path: str, class_name: str) -> bool:
        return path == self.path and (self.class_name is None or class_name == self.class_name)


@dataclass(frozen=True)
class Command:
    """One ``/kernelize`` line: what to do and, for a run, which classes and which options."""

    action: Action
    targets: tuple[Target, ...] = ()  # run: what to run; apply: the one class whose suggestion to push
    generators: tuple[str, ...] = ()
    samples: int | None = None
    dtype: str | None = None
    min_speedup: float | None = None
    line: str = ""  # the command line as written (stripped)

    def overrides(self) -> dict[str, Any]:
        """The options given, as repository config keys (lists, so they survive JSON)."""
        out: dict[str, Any] = {}
        if self.generators:
            out["generators"] = list(self.generators)
        if self.samples is not None:
            out["samples"] = self.samples
        if self.dtype is not None:
            out["dtypes"] = [self.dtype]
        if self.min_speedup is not None:
            out["min_speedup"] = self.min_speedup
        return out


# ---------------------------------------------------------------- finding the command line


def _command_line(body: str | None) -> str | None:
    """The first line of ``body`` that is a command (stripped), skipping fenced code and quotes."""
    closing: str | None = None  # the fence that closes the open code block
    for line in re.split(r"\r\n|\r|\n", body or ""):
        fence = _FENCE_RE.fullmatch(line)
        if closing is not None:
            mark, after = fence.groups() if fence else ("", "")
            if mark[:1] == closing[0] and len(mark) >= len(closing) and not after.strip():
                closing = None  # only the same character, at least as many, and nothing after closes it
            continue
        if fence and not (fence.group(1)[0] == "`" and "`" in fence.group(2)):
            closing = fence.group(1)  # a backtick fence's info string has no backticks (else inline code)
        elif _COMMAND_RE.match(line):  # a quoted line starts with ">", so it never matches
            return line.strip()
    return None


# ---------------------------------------------------------------- parsing


def parse(body: str | None, known_generators: Sequence[str]) -> Command | None:
    """The first command in a comment, or None when there is none; raises ``CommandError``."""
    line = _command_line(body)
    if line is None:
        return None
    word = line[: len(COMMAND_WORD)]  # as written: the case may differ
    if len(line) > MAX_LINE:
        raise CommandError(word, f"command too long ({len(line):,} characters; at most {MAX_LINE:,})")
    tokens = _tokens(line[len(word) :])
    return _Parser(line, tokens, tuple(known_generators)).command()


def _tokens(rest: str) -> list[str]:
    try:
        return shlex.split(rest, posix=True)
    except ValueError:
        pass
    start = _unclosed_quote(rest)
    if start is None:  # shlex's only other complaint: a backslash at the very end
        raise CommandError("\\", "a backslash at the end of the line escapes nothing; remove it") from None
    raise CommandError(
        rest[start:].strip(),
        f"unbalanced {rest[start]} quote at {_show(rest[start:].strip())}; close it or remove it",
    ) from None


def _unclosed_quote(text: str) -> int | None:
    """Where the quote that never closes opens (POSIX shell rules), or None."""
    i, opened = 0, None
    while i < len(text):
        ch = text[i]
        if opened is None:
            if ch == "\\":
                i += 1
            elif ch in "'\"":
                opened = i
        elif text[opened] == '"' and ch == "\\":
            i += 1
        elif ch == text[opened]:
            opened = None
        i += 1
    return opened


class _Parser:
    def __init__(self, line: str, tokens: list[str], generators: tuple[str, ...]) -> None:
        self.line = line
        self.tokens = tokens
        self.known = generators
        self.pos = 0
        self.targets: list[Target] = []
        self.generators: list[str] = []
        self.single: dict[str, Any] = {}

    def command(self) -> Command:
        action: Action = "run"
        if self.tokens and self.tokens[0].lower() in _ACTION:
            action = _ACTION[self.tokens[0].lower()]
            self.pos = 1
            if action == "apply":
                return self._apply()
            if action != "run" and len(self.tokens) > 1:
                extra = self.tokens[1]
                raise CommandError(
                    extra, f"{_show(action)} takes no targets or options; remove {_show(extra)}"
                )
        elif self.tokens and _is_bare(self.tokens[0]):
            raise CommandError(self.tokens[0], _unknown_action(self.tokens[0]))
        while self.pos < len(self.tokens):
            token = self.tokens[self.pos]
            self.pos += 1
            if token.startswith("-"):
                self._option(token)
            else:
                self._target(token)
        return Command(
            action=action,
            targets=tuple(self.targets),
            generators=tuple(self.generators),
            samples=self.single.get("--samples"),
            dtype=self.single.get("--dtype"),
            min_speedup=self.single.get("--min-speedup"),
            line=self.line,
        )

    def _apply(self) -> Command:
        """``apply CLASS`` or ``apply path/to/file.py::CLASS``: one class, no options."""
        if len(self.tokens) < 2:
            raise CommandError(
                self.tokens[0], f"`apply` needs the class whose suggestion to push: {_APPLY_FORM}"
            )
        token = self.tokens[1]
        if token.startswith("-"):
            raise CommandError(token, f"`apply` takes no options; remove {_show(token)}")
        if _is_bare(token):
            if not (token.isidentifier() and not keyword.iskeyword(token)):
                raise CommandError(token, f"{_show(token)} is not a Python class name; {_APPLY_FORM}")
            target = Target("", token)
        else:
            target = _target(token)
            if target.class_name is None:
                raise CommandError(token, f"{_show(token)} names a file; {_APPLY_FORM}")
        if len(self.tokens) > 2:
            extra = self.tokens[2]
            raise CommandError(
                extra, f"`apply` takes one class; remove {_show(extra)} (one command per class)"
            )
        return Command(action="apply", targets=(target,), line=self.line)

    def _option(self, token: str) -> None:
        name, eq, value = token.partition("=")
        if name not in OPTIONS:
            raise CommandError(name, f"unknown option {_show(name)}{_did_you_mean(name, OPTIONS)}")
        if not eq:
            if self.pos == len(self.tokens) or self.tokens[self.pos].startswith("--"):
                raise CommandError(name, f"{_show(name)} needs a value: {_ALLOWED[name](self.known)}")
            value = self.tokens[self.pos]
            self.pos += 1
        elif not value:
            raise CommandError(name, f"{_show(name)} needs a value: {_ALLOWED[name](self.known)}")
        if name == "--generator":
            self._generator(value)
            return
        if name in self.single:
            raise CommandError(name, f"{_show(name)} is given twice; give it once")
        self.single[name] = _VALUE[name](name, value)

    def _generator(self, name: str) -> None:
        if name not in self.known:
            suggestion = _did_you_mean(name, self.known)
            raise CommandError(
                name, f"unknown generator {_show(name)}{suggestion}; {_generators(self.known)}"
            )
        if name in self.generators:
            raise CommandError(name, f"generator {_show(name)} is given twice; give each once")
        self.generators.append(name)

    def _target(self, token: str) -> None:
        if _is_bare(token):
            if token.lower() in ACTIONS:
                raise CommandError(token, f"{_show(token)} must come right after {COMMAND_WORD}")
            raise CommandError(token, f"{_show(token)} is not a target: {_TARGET_FORM}")
        target = _target(token)
        if target in self.targets:
            raise CommandError(token, f"target {_show(token)} is given twice; give each once")
        self.targets.append(target)


def _is_bare(token: str) -> bool:
    """A word that cannot be meant as a path: what a mistyped action looks like."""
    return not token.startswith("-") and not any(c in token for c in "/.:\\")


def _unknown_action(word: str) -> str:
    actions = ", ".join(ACTIONS)
    suggestion = _did_you_mean(word, ACTIONS)
    return f"unknown action {_show(word)}{suggestion}; use one of {actions}, or a target ({_TARGET_SHAPE})"


def _target(token: str) -> Target:
    path, sep, class_name = token.partition("::")
    if sep and not class_name:
        raise CommandError(token, f"{_show(token)} has no class name after ::; {_TARGET_FORM}")
    if sep and not (class_name.isidentifier() and not keyword.iskeyword(class_name)):
        raise CommandError(token, f"{_show(class_name)} in {_show(token)} is not a Python class name")
    if not path:
        raise CommandError(token, f"{_show(token)} has no path before ::; {_TARGET_FORM}")
    problem = _path_problem(path)
    if problem:
        raise CommandError(token, f"{_show(path)} {problem}; {_TARGET_FORM}")
    normal = "/".join(part for part in path.split("/") if part not in ("", "."))
    return Target(normal, class_name if sep else None)


def _path_problem(path: str) -> str | None:
    parts = path.split("/")
    if path.startswith("/") or re.match(r"[A-Za-z]:", path):
        return "is absolute"
    if "\\" in path:
        return "has a backslash (use /)"
    if ".." in parts:
        return "leaves the repository (..)"
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return "has a control character"
    if not path.endswith(".py") or parts[-1] == ".py":
        return "is not a .py file"
    return None


def _samples(name: str, value: str) -> int:
    low, high = SAMPLES
    if not _DIGITS_RE.fullmatch(value) or not low <= int(value) <= high:
        raise CommandError(
            value, f"{_show(name)} must be a whole number from {low} to {high}, not {_show(value)}"
        )
    return int(value)


def _dtype(name: str, value: str) -> str:
    if value not in DTYPES:
        suggestion = _did_you_mean(value, DTYPES)
        raise CommandError(
            value, f"{_show(name)} must be one of {', '.join(DTYPES)}, not {_show(value)}{suggestion}"
        )
    return value


def _min_speedup(name: str, value: str) -> float:
    number = float(value) if _NUMBER_RE.fullmatch(value) else math.nan
    if not (math.isfinite(number) and number >= MIN_SPEEDUP):
        raise CommandError(
            value, f"{_show(name)} must be a finite number of at least {MIN_SPEEDUP}, not {_show(value)}"
        )
    return number


def _generators(known: Sequence[str]) -> str:
    return f"the generators are {', '.join(known)}" if known else "no generators are available"


_VALUE: dict[str, Callable[[str, str], Any]] = {
    "--samples": _samples,
    "--dtype": _dtype,
    "--min-speedup": _min_speedup,
}
_ALLOWED: dict[str, Callable[[Sequence[str]], str]] = {
    "--generator": _generators,
    "--samples": lambda _: f"a whole number from {SAMPLES[0]} to {SAMPLES[1]}",
    "--dtype": lambda _: f"one of {', '.join(DTYPES)}",
    "--min-speedup": lambda _: f"a number of at least {MIN_SPEEDUP}",
}


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1)
    return f" (did you mean {_show(by_lower[close[0]])}?)" if close else ""


def _show(word: str) -> str:
    """``word`` as inline code on one line, clipped; backticks inside survive, an @mention in it never
    pings, and characters that are not printable show as U+FFFD."""
    if len(word) > _SHOWN_WORD:
        word = word[: _SHOWN_WORD - 1] + "…"
    word = "".join(c if c.isprintable() else "\ufffd" for c in word)
    longest = max((len(run) for run in re.findall(r"`+", word)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if word.startswith("`") or word.endswith("`") or not word.strip() else ""
    return f"{ticks}{pad}{word}{pad}{ticks}"


# ---------------------------------------------------------------- help


def help_text(
    known_generators: Sequence[str],
    config_summary: str | None = None,
    error: CommandError | None = None,
) -> str:
    """The reply to ``/kernelize help`` and to a command that could not be read (markdown)."""
    template = environment().get_template("comments/help.md.j2")
    return template.render(
        error=error,
        error_word=_show(error.word) if error is not None else "",
        command_word=COMMAND_WORD,
        generators=list(known_generators),
        dtypes=DTYPES,
        samples=SAMPLES,
        min_speedup=MIN_SPEEDUP,
        config_summary=config_summary,
    )
