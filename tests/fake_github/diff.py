"""Unified-diff ``patch`` parsing, as GitHub uses it to place pull-request review comments.

A pull request file's ``patch`` (what ``GET /repos/{owner}/{repo}/pulls/{n}/files`` returns) is
the unified diff of that file without the ``---``/``+++`` header: one or more hunks, each
starting with ``@@ -OLD_START[,OLD_LEN] +NEW_START[,NEW_LEN] @@``. A review comment may sit on

* the RIGHT side (the new file) on a line that a hunk covers: a context line or an added line;
* the LEFT side (the old file) on a context line or a deleted line;

and a multi-line comment (``start_line`` .. ``line``) must have both ends in the same hunk.
Lines of the file outside every hunk cannot take a comment (GitHub answers 422 "Pull request
review thread line must be part of the diff"). The legacy ``position`` counts lines of the
patch below the first ``@@`` header (later ``@@`` headers count too).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


class PatchError(ValueError):
    """The patch is not a well-formed unified diff (a mistake in the test's fixture)."""


@dataclass
class Hunk:
    index: int
    header: str
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    first_row: int  # index of the header among the patch's lines
    right: dict[int, int] = field(default_factory=dict)  # new-file line -> patch row
    left: dict[int, int] = field(default_factory=dict)  # old-file line -> patch row
    added: int = 0
    deleted: int = 0


@dataclass
class Patch:
    """A parsed patch: its hunks and the lines (rows) of the patch text."""

    text: str
    rows: list[str]
    hunks: list[Hunk]

    @property
    def additions(self) -> int:
        return sum(h.added for h in self.hunks)

    @property
    def deletions(self) -> int:
        return sum(h.deleted for h in self.hunks)

    def hunk_of(self, side: str, line: int) -> Hunk | None:
        """The hunk whose ``side`` ("RIGHT"/"LEFT") covers file line ``line``, or None."""
        for hunk in self.hunks:
            lines = hunk.right if side == "RIGHT" else hunk.left
            if line in lines:
                return hunk
        return None

    def row_of(self, side: str, line: int) -> int | None:
        hunk = self.hunk_of(side, line)
        if hunk is None:
            return None
        return (hunk.right if side == "RIGHT" else hunk.left)[line]

    def position_row(self, position: int) -> int | None:
        """Patch row of a legacy ``position`` (1 = the line below the first ``@@``), or None."""
        row = position  # the first header is row 0
        if 1 <= row < len(self.rows) and not self.rows[row].startswith("@@"):
            return row
        return None

    def hunk_at_row(self, row: int) -> Hunk:
        found = self.hunks[0]
        for hunk in self.hunks:
            if hunk.first_row <= row:
                found = hunk
        return found

    def diff_hunk(self, row: int) -> str:
        """What GitHub reports as a comment's ``diff_hunk``: its hunk's header down to ``row``."""
        hunk = self.hunk_at_row(row)
        return "\n".join(self.rows[hunk.first_row : row + 1])

    def line_at_row(self, row: int) -> tuple[int | None, int | None]:
        """(old line, new line) shown at patch ``row`` (None where that side has no line)."""
        hunk = self.hunk_at_row(row)
        old = next((n for n, r in hunk.left.items() if r == row), None)
        new = next((n for n, r in hunk.right.items() if r == row), None)
        return old, new


def parse_patch(text: str) -> Patch:
    """Parse a GitHub ``patch`` string; raises PatchError when hunk counts do not add up."""
    rows = text.split("\n")
    if rows and rows[-1] == "":
        rows.pop()  # a trailing newline ends the last row, it is not a row of its own
    hunks: list[Hunk] = []
    current: Hunk | None = None
    old = new = 0
    old_left = new_left = 0

    def close() -> None:
        if current is not None and (old_left or new_left):
            raise PatchError(
                f"hunk {current.header!r} promises {current.old_len} old / {current.new_len} new lines "
                f"but {current.old_len - old_left} / {current.new_len - new_left} follow"
            )

    for i, row in enumerate(rows):
        header = HUNK_HEADER.match(row)
        if header:
            close()
            o_start, o_len, n_start, n_len = header.group(1, 2, 3, 4)
            current = Hunk(
                index=len(hunks),
                header=row,
                old_start=int(o_start),
                old_len=1 if o_len is None else int(o_len),
                new_start=int(n_start),
                new_len=1 if n_len is None else int(n_len),
                first_row=i,
            )
            hunks.append(current)
            old, new = current.old_start, current.new_start
            old_left, new_left = current.old_len, current.new_len
            continue
        if current is None:
            raise PatchError(f"patch does not start with a hunk header: {row!r}")
        if row.startswith("\\"):  # "\ No newline at end of file"
            continue
        kind = row[:1]
        if kind == "+":
            current.right[new] = i
            current.added += 1
            new, new_left = new + 1, new_left - 1
        elif kind == "-":
            current.left[old] = i
            current.deleted += 1
            old, old_left = old + 1, old_left - 1
        elif kind in (" ", ""):  # an empty row is a context line whose single space was trimmed
            current.left[old] = i
            current.right[new] = i
            old, new = old + 1, new + 1
            old_left, new_left = old_left - 1, new_left - 1
        else:
            raise PatchError(f"patch row {i} starts with neither ' ', '+', '-' nor '@@': {row!r}")
        if old_left < 0 or new_left < 0:
            raise PatchError(f"hunk {current.header!r} has more lines than its header says")
    close()
    return Patch(text=text, rows=rows, hunks=hunks)


def make_patch(hunks: list[tuple[int, int, list[str]]]) -> str:
    """Build a patch from (old_start, new_start, rows) triples; rows start with ' ', '+' or '-'.

    Convenience for tests: ``make_patch([(1, 1, [" a", "-b", "+B", " c"])])`` gives
    ``"@@ -1,3 +1,3 @@\\n a\\n-b\\n+B\\n c"``.
    """
    out: list[str] = []
    for old_start, new_start, rows in hunks:
        old_len = sum(1 for r in rows if r[:1] in (" ", "-"))
        new_len = sum(1 for r in rows if r[:1] in (" ", "+"))
        out.append(f"@@ -{old_start},{old_len} +{new_start},{new_len} @@")
        out.extend(rows)
    return "\n".join(out)


def added_file_patch(lines: list[str]) -> str:
    """The patch GitHub shows for a new file made of ``lines``."""
    return "\n".join([f"@@ -0,0 +1,{len(lines)} @@", *(f"+{line}" for line in lines)])


def file_patch(old: str | None, new: str) -> str:
    """The patch GitHub shows for a file that was ``old`` (None: not there) and is ``new``: unified
    hunks with three lines of context, without the ``---``/``+++`` header."""
    if old is None:
        return added_file_patch(new.splitlines())
    rows = list(difflib.unified_diff(old.splitlines(), new.splitlines(), n=3, lineterm=""))
    return "\n".join(rows[2:])  # past the ---/+++ header (a removed "-- x" line is a row too)
