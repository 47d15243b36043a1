"""The messages that cross the Celery queue between the github side (``bot/``) and the GPU workers.

Three, each a dataclass with a ``version`` and the one home of its defaults:

- :class:`GpuRequest`: bot → GPU worker, one file's classes to kernelize (``kernelize_file``);
- :class:`ModuleResult`: GPU worker → bot, what that task found (its link and the chord);
- :class:`PublishContext`: bot → bot, what the chord's publish step (or its error callback) needs.

Version policy: a receiver reads exactly its own version of a message. Any change to a message's
fields, or to the records it carries (``runners/results.py``: a field added, even an optional one,
removed, renamed or changed in meaning), takes the next version number. A message of another
version, without one, lacking a required field, carrying a field the receiver does not know or a
value of the wrong type is refused with a :class:`~runners.results.MessageError`: one line saying
which, never a guess (an older GPU worker would otherwise drop a repository's tighter tolerance
unseen). The bot and the GPU workers therefore run one release. A GPU request or a module result
refused shows on the pull request's check run, as the reason its modules failed; a publish context
refused says where to report no more, so it is only logged (with the reason) and its task fails.

This module is GPU-side: the bot imports it, it imports nothing of the bot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from runners.results import (
    DEFAULT_MIN_SPEEDUP,
    DEFAULT_SAMPLES,
    DEFAULT_TIMEOUT_S,
    DeviceInfo,
    MessageError,
    ModuleReport,
    from_plain,
    kind_of,
    to_dict,
)

GPU_REQUEST_VERSION = 1
MODULE_RESULT_VERSION = 1
PUBLISH_CONTEXT_VERSION = 1
# A version refused means the bot and its workers run different releases; a reason fits the 120
# characters of a module's row on the check run.
ANOTHER_RELEASE = "another Kernelize release"


class Message:
    """What the three messages share: ``to_dict`` for the queue, ``from_dict`` to read one, strictly
    and its version first (see the module docstring)."""

    VERSION: ClassVar[int]
    WHAT: ClassVar[str]  # the message, as a reason names it
    READER: ClassVar[str]  # who reads it, as a reason names it

    def to_dict(self) -> dict[str, Any]:
        return dict(to_dict(self))

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        if not isinstance(data, dict):
            raise MessageError(f"{cls.WHAT} is {kind_of(data)}, not an object")
        if data.get("version") != cls.VERSION:
            has = f"is version {data['version']!r}" if "version" in data else "has no version"
            reads = f"this {cls.READER} reads version {cls.VERSION} only"
            raise MessageError(f"{cls.WHAT} {has}; {reads} ({ANOTHER_RELEASE})")
        return from_plain(cls, data, cls.WHAT)


@dataclass
class GpuRequest(Message):
    """One file's classes to kernelize (``runners/tasks.py``: ``kernelize_file``), with everything the
    GPU worker needs: it reaches neither GitHub nor the database.

    Unknown fields are refused, not ignored (a field this worker does not know is a setting it would
    drop: a newer bot sends the next version instead). Defaults: the engine's (``runners/results.py``)."""

    VERSION: ClassVar[int] = GPU_REQUEST_VERSION
    WHAT: ClassVar[str] = "the GPU request"
    READER: ClassVar[str] = "GPU worker"

    bundle: str  # the repository's Python at the head (runners/bundle.py)
    rel_path: str  # the file, relative to the repository
    class_names: list[str]  # its classes to kernelize, checked applied together
    generators: list[str] = field(default_factory=list)  # empty: everything this worker can run
    samples: int = DEFAULT_SAMPLES
    min_speedup: float = DEFAULT_MIN_SPEEDUP
    timeout_s: float = DEFAULT_TIMEOUT_S
    dtypes: list[str] = field(default_factory=list)  # the first is checked in; empty: as built
    tolerance: dict[str, list[float]] | None = None  # tighter bounds by dtype key (never looser)
    device: str = "auto"  # "auto", "cuda" or "cpu"
    modules: dict[str, Any] = field(default_factory=dict)  # the repository config's ``modules:``
    # The keyword arguments of ``kernelize.progress`` that announce this task's start: the bot's,
    # opaque here. None: announce nothing.
    notify: dict[str, Any] | None = None
    version: int = GPU_REQUEST_VERSION


@dataclass
class ModuleResult(Message):
    """What a GPU task returns: the device it ran on and one report per class it was asked for, in
    the request's order.

    Unknown fields are refused, not ignored, here and in every report it carries (a report from a
    newer worker is a newer version: reading only part of it could post what was never verified)."""

    VERSION: ClassVar[int] = MODULE_RESULT_VERSION
    WHAT: ClassVar[str] = "the module result"
    READER: ClassVar[str] = "github worker"

    device: DeviceInfo
    modules: list[ModuleReport]
    version: int = MODULE_RESULT_VERSION


@dataclass
class PublishContext(Message):
    """What the chord's publish step (``bot/flows/publish.py``: ``publish_pull_request``) and its error
    callback (``publish_failed``) need to report one job on its pull request.

    Unknown fields are refused, not ignored (the github workers that plan and those that publish
    run one release; a field unknown here is a setting this release would drop). ``targets`` and
    ``kernelized`` hold the planner's own records (``bot/planning.py``, ``bot/flows/plan.py``)."""

    VERSION: ClassVar[int] = PUBLISH_CONTEXT_VERSION
    WHAT: ClassVar[str] = "the publish context"
    READER: ClassVar[str] = "github worker"

    installation_id: int
    owner: str
    repo: str
    number: int
    head_sha: str
    check_run_id: int
    key: str  # the run's idempotency key (the check run's external id)
    job_id: int | None
    targets: list[dict[str, Any]]  # the modules run: path, class_name, their lines and checksums
    patches: dict[str, str]  # each changed file's diff in the pull request ("": GitHub shows none)
    mode: str  # the repository's ``comment.mode``
    when_nothing_found: str  # the repository's ``comment.when_nothing_found``
    max_modules: int
    over: list[str] = field(default_factory=list)  # targets past ``max_modules``, not run
    kernelized: list[dict[str, Any]] = field(default_factory=list)  # applied suggestions, not run again
    comment_id: int | None = None  # the command that started the run, answered when it ends
    min_speedup: float = DEFAULT_MIN_SPEEDUP
    min_speedup_vs_compile: float | None = None
    private: bool = True
    version: int = PUBLISH_CONTEXT_VERSION
