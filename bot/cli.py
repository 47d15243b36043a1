"""``kernelize``: the command line.

Exit codes: 0 when the run completed (whatever the verdicts), 2 for a user
error (one line on stderr, no traceback), 1 for an internal failure.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import subprocess
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from runners.observability import JsonFormatter  # re-exported: tests and bench/ import it from here
from runners.results import DEFAULT_MIN_SPEEDUP, DEFAULT_SAMPLES, DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from runners.generators import Generator
    from runners.generators.base import Problem
    from runners.results import ModuleReport, RunReport

USER_ERROR, INTERNAL_ERROR = 2, 1


class UserError(Exception):
    """Something the user can fix; the message is the whole story."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UserError(message)


def _engine_arguments(parser: argparse.ArgumentParser, *, review: bool) -> None:
    """The engine's options, the same for ``run`` and ``review``. For ``review`` the repository
    config at HEAD supplies what an option leaves unset (generators, samples, dtype, min speedup)."""
    config = "the repository config's, else " if review else ""
    parser.add_argument(
        "--generator",
        action="append",
        dest="generators",
        metavar="NAME",
        help=f"candidate generator (repeatable; default: {config}files with --candidates, else every "
        "generator this machine can run: kernelllm with its weights on a GPU, inductor on a GPU, template)",
    )
    parser.add_argument("--candidates", metavar="DIR", help="folder of candidate files (files generator)")
    parser.add_argument(
        "--model",
        metavar="ID_OR_DIR",
        help="kernelllm: weights (default facebook/KernelLLM); openai: the served model's name",
    )
    parser.add_argument("--temperature", type=float, help="sampling temperature (default 0.6)")
    parser.add_argument("--top-p", type=float, help="nucleus sampling (default 0.95)")
    parser.add_argument("--max-new-tokens", type=int, help="answer length limit (default 2048)")
    parser.add_argument(
        "--seed",
        type=int,
        help="repeat a run: kernelllm's sampling and the judge's inputs (default: the judge draws a "
        "fresh seed each run; the report gives it)",
    )
    parser.add_argument(
        "--api-base", metavar="URL", help="openai: server base URL, e.g. http://127.0.0.1:8000/v1"
    )
    parser.add_argument(
        "--api-mode", choices=("completions", "chat"), help="openai: endpoint (default completions)"
    )
    parser.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="openai: environment variable holding the API key "
        "(default OPENAI_API_KEY; keys are never taken on the command line)",
    )
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument(
        "--samples",
        type=int,
        default=None if review else DEFAULT_SAMPLES,
        help=f"candidates asked of each sampling generator (default: {config}{DEFAULT_SAMPLES})",
    )
    parser.add_argument(
        "--min-speedup",
        type=float,
        default=None if review else DEFAULT_MIN_SPEEDUP,
        help=f"a speedup must reach this (default: {config}{DEFAULT_MIN_SPEEDUP})",
    )
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS", help="per candidate"
    )
    parser.add_argument("--memory", type=int, default=8192, metavar="MIB", help="per candidate")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    parser.add_argument(
        "--dtype",
        choices=("float32", "float16", "bfloat16"),
        help=f"check in this dtype (floating parameters and inputs are cast); default: {config}as built",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument(
        "--no-isolation",
        action="store_true",
        help="run the module and the candidates without the bubblewrap sandbox: only for your own "
        "code on your own machine (they can then read your files and environment, reach the network "
        "and leave processes behind)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kernelize", description="Verified, timed Triton kernels for PyTorch modules.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="generate, verify and time Triton candidates for modules")
    run.add_argument("targets", nargs="+", metavar="TARGET", help="path/to/file.py or path/to/file.py::Class")
    _engine_arguments(run, review=False)
    run.add_argument("--config", metavar="FILE", help="repository config (.github/kernelize.yml format)")
    run.add_argument(
        "--kernel-only",
        action="store_true",
        help=(
            "verify the kernel alone, without the original path "
            "(the original computation kept for non-CUDA inputs)"
        ),
    )
    run.add_argument("--json", metavar="PATH", help="write the JSON report here")
    run.add_argument("--markdown", metavar="PATH", help="write the markdown report here")
    run.add_argument(
        "--show-code", action="store_true", help="print each module's suggested code after the table"
    )
    run.add_argument(
        "--write-suggestions",
        metavar="DIR",
        help="write each file with its suggestions applied under DIR (at its path from the repository)",
    )
    review = sub.add_parser(
        "review",
        help="what the App would post on a pull request, for a local git range, written to a folder",
    )
    review.add_argument(
        "range",
        metavar="BASE..HEAD",
        help="the change to review: HEAD into BASE, diffed from their merge base as a pull request is",
    )
    review.add_argument("--repo", default=".", metavar="PATH", help="the git repository (default: here)")
    review.add_argument(
        "--out",
        default="kernelize-review",
        metavar="DIR",
        help="write review.md, summary.md, check-run.md, applied.diff and files/ here "
        "(default kernelize-review)",
    )
    _engine_arguments(review, review=True)
    worker = sub.add_parser("worker", help="run a queue worker (github: GitHub side; gpu: the engine)")
    worker.add_argument("--queues", default="github", help="comma-separated: github, gpu (default github)")
    worker.add_argument(
        "--concurrency", type=int, default=1, help="processes (default 1: one task at a time)"
    )
    worker.add_argument(
        "--gpus",
        metavar="0,1,…",
        help="gpu queue: one worker process per GPU, each seeing only its own (CUDA_VISIBLE_DEVICES)",
    )
    worker.add_argument(
        "--warm",
        action="append",
        metavar="GENERATOR",
        help="gpu queue: load this generator's model before taking tasks (repeatable)",
    )
    worker.add_argument(
        "--health-port",
        type=int,
        metavar="PORT",
        help="with --gpus: serve /healthz and /metrics (Prometheus) on this port",
    )
    serve = sub.add_parser(
        "serve", help="receive GitHub webhooks (settings from KERNELIZE_* variables or .env)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    serve.add_argument(
        "--worker",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also run a worker for both queues (default: on with the embedded broker, off otherwise)",
    )
    setup = sub.add_parser(
        "setup", help="create the GitHub App from deploy/app-manifest.json and write its settings"
    )
    setup.add_argument("--url", required=True, help="this server's public base URL (webhooks, sign-in)")
    setup.add_argument("--org", help="create the App for this organization (default: your account)")
    setup.add_argument("--name", help="the App's name (default: the manifest's)")
    setup.add_argument(
        "--github-web-url", default="https://github.com", help="GitHub Enterprise: https://HOST"
    )
    setup.add_argument(
        "--github-api-url", default="https://api.github.com", help="GitHub Enterprise: https://HOST/api/v3"
    )
    setup.add_argument("--env-file", default=".env", help="settings file to write (default .env)")
    setup.add_argument("--port", type=int, default=0, help="local port for the browser (default: any)")
    setup.add_argument("--no-browser", action="store_true", help="print the local URL, open no browser")
    setup.add_argument(
        "--timeout", type=float, default=900.0, metavar="SECONDS", help="wait this long (default 900)"
    )
    setup.add_argument("--force", action="store_true", help="replace settings already in the env file")
    setup.add_argument("--manifest", help="App manifest to start from (default deploy/app-manifest.json)")
    return parser


def _split_target(target: str) -> tuple[str, str | None]:
    path, sep, cls = target.partition("::")
    if sep and not cls.isidentifier():
        raise UserError(f"{target}: '{cls}' is not a class name")
    return path, (cls or None)


def _root_for(config: str | None) -> Path:
    """Config keys are relative to the repository: the folder above ``.github``, else the cwd."""
    if config:
        parent = Path(config).resolve().parent
        if parent.name == ".github":
            return parent.parent
    return Path.cwd()


def _check_engine_args(args: argparse.Namespace) -> None:
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    if args.temperature is not None and args.temperature <= 0:
        raise UserError(f"--temperature must be positive, got {args.temperature}")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise UserError(f"--top-p must be in (0, 1], got {args.top_p}")
    if args.samples is not None and args.samples < 1:
        raise UserError(f"--samples must be at least 1, got {args.samples}")
    if args.min_speedup is not None and args.min_speedup <= 0:
        raise UserError(f"--min-speedup must be positive, got {args.min_speedup}")
    if args.timeout <= 0 or args.memory <= 0:
        raise UserError("--timeout and --memory must be positive")


def _generator_options(args: argparse.Namespace, device: str) -> dict[str, Any]:
    return {
        "candidates": args.candidates,
        "model": args.model,
        "device": device,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_new_tokens": args.max_new_tokens,
        "seed": args.seed,
        "api_base": args.api_base,
        "api_mode": args.api_mode,
        "api_key_env": args.api_key_env,
        "timeout_s": args.timeout,
        "dtype": args.dtype,
    }


def _progress(quiet: bool) -> Callable[[str], None]:
    if quiet:
        return lambda _: None
    return lambda msg: print(f"kernelize: {msg}", file=sys.stderr, flush=True)


def _check_ran(report: RunReport) -> None:
    """A run whose every generator failed before producing anything (no weights, no server), or
    whose every module could not be built, is the user's to fix: say what, exit 2. Generators that
    declined a module (an op they have no template for) gave a verdict: the run completed."""
    from runners.results import is_generator_row

    gen_rows = [c for m in report.modules for c in m.candidates if is_generator_row(c)]
    failed = [c for c in gen_rows if not c.provenance.get("declined")]
    if failed and all(is_generator_row(c) for m in report.modules for c in m.candidates):
        raise UserError(failed[0].reason)
    built = [m for m in report.modules if m.status != "skipped"]
    if not built and report.modules:
        first = report.modules[0]
        print(f"\nTo make {first.target} buildable:\n\n{first.snippet}")
        raise UserError(f"{first.target}: inputs cannot be built: {first.reason}")


def cmd_run(args: argparse.Namespace) -> int:
    from runners import pipeline, render, together
    from runners.discover import DiscoveryError
    from runners.inputs import ConfigError, load_module_entries
    from runners.results import RunReport, to_dict

    _check_engine_args(args)
    for out in (args.json, args.markdown):
        if out and not Path(out).resolve().parent.is_dir():
            raise UserError(f"{out}: the folder does not exist")
    written = Path(args.write_suggestions) if args.write_suggestions else None
    if written is not None and written.exists() and not written.is_dir():
        raise UserError(f"--write-suggestions {args.write_suggestions}: not a folder")
    _isolation(args.no_isolation)

    try:
        entries = load_module_entries(args.config) if args.config else {}
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    root = _root_for(args.config)

    problems = []
    for target in args.targets:
        path, cls = _split_target(target)
        if not Path(path).is_file():
            raise UserError(f"{path}: no such file")
        if not path.endswith(".py"):
            raise UserError(f"{path}: not a Python file")
        try:
            found, modules = pipeline.problems_for(path, str(root), cls, entries)
        except DiscoveryError as exc:
            raise UserError(str(exc)) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{path}: cannot read: {exc}") from None
        if not modules:
            raise UserError(f"{path}: no nn.Module class found")
        if not found:
            names = ", ".join(m.name for m in modules)
            raise UserError(f"{path}: no nn.Module class named {cls} (found: {names})")
        problems += found

    device = _device(args.device)
    generators, unavailable = _generators(
        args.generators, args.candidates, device, _generator_options(args, device)
    )
    settings = pipeline.EngineSettings(
        device=device,
        timeout_s=args.timeout,
        memory_mb=args.memory,
        min_speedup=args.min_speedup,
        samples=args.samples,
        compile_baseline=not args.no_compile,
        original_path=not args.kernel_only,
        seed=args.seed,
        dtype=args.dtype,
    )
    progress = _progress(args.quiet)
    report = RunReport(device=pipeline.describe_device(device), min_speedup=args.min_speedup)
    by_file: dict[str, dict[str, Problem]] = {}
    for problem in problems:
        by_file.setdefault(problem.file, {})[problem.class_name] = problem
    done = {}
    for same_file in by_file.values():  # a file at a time: its suggestions are checked applied together
        for module in together.kernelize_file(list(same_file.values()), generators, settings, progress):
            module.unavailable = dict(unavailable)
            done[module.target] = module
    report.modules = [done[target] for target in dict.fromkeys(p.target for p in problems)]

    if args.json:
        Path(args.json).write_text(json.dumps(to_dict(report), indent=2) + "\n", encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(render.markdown(report), encoding="utf-8")
    print(render.text_table(report))
    if args.show_code:
        _show_code(report, problems)
    if written is not None:
        _write_suggestions(written, report, by_file)
    _check_ran(report)
    return 0


def _show_code(report: RunReport, problems: Sequence[Problem]) -> None:
    """Each module's suggested code, exactly as verified: what replaces the class's lines."""
    spans = {p.target: (p.module.lineno, p.module.end_lineno) for p in problems}
    for m in report.modules:
        best = m.best_candidate()
        if best is None or m.best_source is None:
            print(f"\n# {m.target}: no verified candidate, so no code to suggest")
            continue
        first, last = spans[m.target]
        code = m.best_source if m.best_source.endswith("\n") else m.best_source + "\n"
        print(
            f"\n# {m.target}: the suggested code ({best.generator}:{best.id}), "
            f"replacing lines {first}-{last} of {m.file}\n"
        )
        print(code, end="")


def _write_suggestions(folder: Path, report: RunReport, by_file: dict[str, dict[str, Problem]]) -> None:
    """Each file with its modules' suggestions applied together, under ``folder`` at its path from
    the repository root (its name alone when it lies outside)."""
    from runners.apply import ClassEdit, applied_all

    modules = {m.target: m for m in report.modules}
    wrote = 0
    for same_file in by_file.values():
        first = next(iter(same_file.values()))
        suggestions = [
            ClassEdit(p.class_name, p.module.lineno, p.module.end_lineno, source)
            for p in same_file.values()
            if (source := modules[p.target].best_source) is not None
        ]
        if not suggestions:
            continue
        rel = Path(first.rel_path)
        if rel.is_absolute() or ".." in rel.parts:
            rel = Path(rel.name)
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(applied_all(first.source, suggestions), encoding="utf-8")
        names = ", ".join(s.class_name for s in suggestions)
        print(f"kernelize: wrote {target} ({names} suggested)")
        wrote += 1
    if not wrote:
        print(f"kernelize: no suggestion to write under {folder}: no module has a verified candidate")


def cmd_review(args: argparse.Namespace) -> int:
    """What the App would post for the change BASE..HEAD of a local repository (bot/local_review.py),
    through the App's own planning, engine and rendering."""
    from bot import local_review

    _check_engine_args(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: not a folder")
    try:  # the input first (git and the AST only, no torch): its errors come back at once
        change = local_review.read_change(args.repo, args.range)
        config = local_review.load_config(change)
        planned = local_review.plan(change, config)
    except local_review.ReviewError as exc:
        raise UserError(str(exc)) from None

    from runners import pipeline, tasks
    from runners.inputs import ConfigError
    from runners.results import RunReport

    try:
        entries = tasks.module_entries(config.modules)
    except ConfigError as exc:
        raise UserError(f"{exc} (see docs/config.md)") from None
    _isolation(args.no_isolation)

    # An option given here wins over the repository config, as a /kernelize command's options do.
    device = _device(args.device)
    dtype = args.dtype or (config.dtypes[0] if config.dtypes else None)
    options = {**_generator_options(args, device), "dtype": dtype}
    generators, unavailable = _generators(
        args.generators or config.generators, args.candidates, device, options
    )
    min_speedup = args.min_speedup or config.min_speedup or DEFAULT_MIN_SPEEDUP
    settings = pipeline.EngineSettings(
        device=device,
        timeout_s=args.timeout,
        memory_mb=args.memory,
        min_speedup=min_speedup,
        samples=args.samples or config.samples or DEFAULT_SAMPLES,
        compile_baseline=not args.no_compile,
        seed=args.seed,
        dtype=dtype,
        tolerance={k: list(v) for k, v in config.tolerance_table().items()},
    )
    progress = _progress(args.quiet)

    def run_file(root: Path, path: str, names: list[str]) -> list[ModuleReport]:
        return tasks.kernelize_classes(
            root, path, names, entries, generators, settings, unavailable=unavailable, progress=progress
        )

    report = RunReport(
        device=pipeline.describe_device(device),
        min_speedup=min_speedup,
        min_speedup_vs_compile=config.min_speedup_vs_compile,
    )
    try:
        local_review.kernelize(change, planned, config, run_file, report)
    except local_review.ReviewError as exc:
        raise UserError(str(exc)) from None
    rendered = local_review.render(change, planned, config, report)
    for path, what in local_review.write(out, rendered):
        print(f"kernelize: wrote {path}: {what}")
    _check_ran(report)
    return 0


NO_ISOLATION_WARNING = (
    "kernelize: warning: --no-isolation: the module and the candidates run without a sandbox: "
    "they can read your files and environment, reach the network and leave processes behind"
)


def _isolation(off: bool) -> None:
    """Untrusted code runs only in a sandbox (runners/sandbox.py): refuse to start without one,
    unless the user switched it off for their own code."""
    from runners import sandbox

    if off:
        sandbox.set_isolation(False)
        print(NO_ISOLATION_WARNING, file=sys.stderr, flush=True)
        return
    problem = sandbox.isolation_problem()
    if problem:
        raise UserError(f"{problem} (see docs/self-hosting.md; --no-isolation: your own code, unsandboxed)")


def _generators(
    named: list[str] | None, candidates: str | None, device: str, options: dict[str, Any]
) -> tuple[list[Generator], dict[str, str]]:
    """The generators to ask, and those left out with the reason.

    Unnamed: ``files`` when there is a candidates folder, else the default portfolio (every
    generator this machine can run). A named generator that cannot run here is reported, not
    fatal, unless none is left."""
    from runners.generators import AVAILABLE, GeneratorError, default_portfolio, make_generator

    unavailable: dict[str, str] = {}
    if named:
        names = list(dict.fromkeys(named))
        unknown = [n for n in names if n not in AVAILABLE]
        if unknown:
            raise UserError(f"unknown generator {unknown[0]!r} (available: {', '.join(AVAILABLE)})")
    elif candidates:
        names = ["files"]
    else:
        names, unavailable = default_portfolio(device, options)
    generators: list[Generator] = []
    for name in names:
        try:
            generators.append(make_generator(name, options))
        except GeneratorError as exc:
            unavailable[name] = str(exc)
    if not generators:
        raise UserError(
            "no generator can run here: " + "; ".join(f"{n}: {w}" for n, w in unavailable.items())
        )
    return generators, unavailable


def _device(choice: str) -> str:
    import torch

    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is available")
    return choice


def cmd_worker(args: argparse.Namespace) -> int:
    """A Celery worker. ``github`` needs the GitHub App's settings; ``gpu`` alone reads only the broker
    from the environment and holds no credentials (runners/worker.py); ``--gpus`` runs one per GPU
    under runners/supervisor.py."""
    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    unknown = set(queues) - {"github", "gpu"}
    if not queues or unknown:
        raise UserError(f"--queues takes github and/or gpu, got {args.queues!r}")
    if (args.gpus is not None or args.health_port is not None or args.warm) and queues != ["gpu"]:
        raise UserError("--gpus, --warm and --health-port are for GPU workers: use them with --queues gpu")
    if args.health_port is not None and not 0 < args.health_port < 65536:
        raise UserError(f"--health-port must be between 1 and 65535, got {args.health_port}")
    if args.health_port is not None and args.gpus is None:
        raise UserError("--health-port needs --gpus (the supervisor serves it)")
    if args.concurrency < 1:
        raise UserError(f"--concurrency must be at least 1, got {args.concurrency}")
    warm = [arg for name in args.warm or [] for arg in ("--warm", name)]
    if args.gpus is not None:
        from runners import supervisor

        try:
            gpus = supervisor.parse_gpus(args.gpus)
        except supervisor.GpuListError as exc:
            raise UserError(str(exc)) from None
        if args.concurrency != 1:
            raise UserError("--gpus runs one process per GPU, one task at a time: drop --concurrency")
        from runners.observability import configure_logging

        configure_logging()
        command = [sys.executable, "-m", "runners.worker", "--queues", "gpu", "--hostname", "gpu{gpu}@%h"]
        return supervisor.supervise(
            gpus, [*command, *warm], health_port=args.health_port, check=supervisor.isolation_check
        )
    if "github" not in queues:
        from runners import worker  # checks its sandbox before it takes a task

        return worker.main(["--queues", ",".join(queues), "--concurrency", str(args.concurrency), *warm])
    if "gpu" in queues:
        _worker_isolation("this worker")
    from bot.settings import SettingsError, load_settings
    from runners.celery_app import make_celery

    try:
        settings = load_settings(web=False)
    except SettingsError as exc:
        raise UserError(str(exc)) from None
    if settings.github_app_id is None or settings.private_key() is None:
        raise UserError(
            "the github queue needs KERNELIZE_GITHUB_APP_ID and KERNELIZE_GITHUB_PRIVATE_KEY(_PATH)"
        )
    from bot import tasks as bot_tasks
    from bot.db import prepare_sqlite_files
    from runners import observability
    from runners import tasks as runner_tasks

    prepare_sqlite_files(settings.broker_url, settings.result_backend)
    app = make_celery(settings.broker_url, settings.result_backend)
    bot_tasks.register(app)
    if "gpu" in queues:  # one machine doing both: the same process also runs the engine
        runner_tasks.register(app)
    observability.instrument()  # JSON logs with the delivery id, task id and repository of each task
    pool = ["--pool", "solo"] if args.concurrency == 1 else ["--concurrency", str(args.concurrency)]
    app.worker_main(
        [
            "worker",
            "-Q",
            ",".join(queues),
            *pool,
            "--loglevel",
            "INFO",
            "--without-gossip",
            "--without-mingle",
        ]
    )
    return 0


def _worker_isolation(who: str) -> None:
    """A worker that takes ``gpu`` tasks runs pull requests' code: it starts only where the sandbox
    can be set up (each task checks again, runners/tasks.py)."""
    from runners import sandbox

    refused = sandbox.refusal(sandbox.probe_device())
    if refused:
        raise UserError(f"{refused}; {who} runs no code from pull requests without its sandbox")


def _die_with_parent() -> None:
    """In the child, before exec: receive SIGTERM when the parent dies, so no worker is orphaned."""
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGTERM)


class _SupervisedWorker:
    """``kernelize serve``'s worker, started again whenever it dies (a crash, the kernel's OOM killer,
    a stray SIGKILL) until serve stops it: otherwise serve would go on accepting deliveries that
    nothing takes. The embedded broker gives a dead worker's tasks back (bot/broker.py), so the next
    worker runs them. Restarts come after 1 s, doubling up to 30 s while the worker keeps dying
    within a minute of its start."""

    def __init__(self, command: list[str]) -> None:
        import threading

        self.command = command
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(command, preexec_fn=_die_with_parent)
        # The watcher starts the replacements: their parent-death signal follows this thread, which
        # lives until stop().
        self.thread = threading.Thread(target=self._watch, name="kernelize-serve-worker", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        import time

        log = logging.getLogger("kernelize.serve")
        delay, started = 1.0, time.monotonic()
        while True:
            code = self.proc.wait()
            if self.stopping.is_set():
                return
            delay = 1.0 if time.monotonic() - started > 60 else min(2 * delay, 30.0)
            log.error("kernelize serve's worker exited (code %s); starting another in %.0f s", code, delay)
            if self.stopping.wait(delay):
                return
            with self.lock:
                if self.stopping.is_set():
                    return
                self.proc = subprocess.Popen(self.command, preexec_fn=_die_with_parent)
                started = time.monotonic()

    def stop(self) -> None:
        with self.lock:
            self.stopping.set()
            self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.thread.join(timeout=5)


def cmd_serve(args: argparse.Namespace) -> int:
    # The web process: no torch, nothing that waits on GitHub or a GPU (see ARCHITECTURE.md).
    from bot.settings import SettingsError, load_settings, mask_url

    if not 0 < args.port < 65536:
        raise UserError(f"--port must be between 1 and 65535, got {args.port}")
    try:
        settings = load_settings()
    except SettingsError as exc:
        raise UserError(str(exc)) from None

    import uvicorn
    from sqlalchemy.exc import SQLAlchemyError

    from bot import db
    from bot.enqueue import celery_publisher
    from bot.web import create_app
    from runners.celery_app import celery_broker_ok, celery_queue_depth, make_celery

    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    engine = db.make_engine(settings.database_url)
    try:
        db.create_schema(engine)
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise UserError(f"cannot open the database {mask_url(settings.database_url)}: {reason}") from None
    db.prepare_sqlite_files(settings.broker_url, settings.result_backend)
    celery = make_celery(settings.broker_url, settings.result_backend)
    from bot.events import decide as events_decide

    def decide(event: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        # Check-run events for other apps' runs are not ours: bot.events needs our app id.
        return events_decide(event, payload, app_id=settings.github_app_id)

    app = create_app(
        settings,
        decide=decide,
        enqueue=celery_publisher(celery),  # send_task's message, on a producer each thread keeps
        session_factory=db.session_factory(engine),
        broker_ok=celery_broker_ok(celery),
        queue_depth=celery_queue_depth(celery),
    )
    # One machine, no services: the embedded broker and a worker for both queues beside the web app.
    embedded = settings.broker_url.startswith("sqla+")
    worker = None
    if args.worker or (args.worker is None and embedded):
        # Refused before anything listens: a server whose worker cannot isolate would take pull
        # requests and answer none.
        _worker_isolation("kernelize serve's worker (--no-worker runs the web side alone)")
        worker = _SupervisedWorker([sys.executable, "-m", "bot.cli", "worker", "--queues", "github,gpu"])
    try:
        # log_config=None: uvicorn's own lines go through the JSON handler above.
        uvicorn.run(app, host=args.host, port=args.port, log_config=None)
    finally:
        if worker is not None:
            worker.stop()
    return 0


def cmd_setup(args: argparse.Namespace) -> int:
    """GitHub's manifest flow through a local page (bot/setup.py); one line on success."""
    from bot import setup

    if not 0 <= args.port < 65536:
        raise UserError(f"--port must be between 0 and 65535, got {args.port}")
    if args.timeout <= 0:
        raise UserError(f"--timeout must be positive, got {args.timeout}")
    if args.org is not None and not re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})", args.org):
        raise UserError(f"--org: {args.org!r} is not a GitHub organization name")
    try:
        options = setup.SetupOptions(
            public_url=setup.check_base_url(args.url, "--url"),
            env_file=Path(args.env_file),
            org=args.org,
            name=args.name,
            web_url=setup.check_base_url(args.github_web_url, "--github-web-url"),
            api_url=setup.check_base_url(args.github_api_url, "--github-api-url"),
            port=args.port,
            open_browser=not args.no_browser,
            timeout_s=args.timeout,
            force=args.force,
            manifest_path=Path(args.manifest) if args.manifest else setup.MANIFEST_PATH,
        )
        outcome = setup.run(options, say=lambda line: print(line, flush=True))
    except setup.SetupError as exc:
        raise UserError(str(exc)) from None
    app = outcome.app or {}
    print(
        f"kernelize: created the GitHub App {app.get('slug') or app.get('id')} (id {app.get('id')}); "
        f"settings in {outcome.env_file}, key in {outcome.pem}; "
        f"install it: {app.get('html_url')}/installations/new",
        flush=True,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.command == "run":
            return cmd_run(args)
        if args.command == "review":
            return cmd_review(args)
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "worker":
            return cmd_worker(args)
        if args.command == "setup":
            return cmd_setup(args)
        raise UserError(f"unknown command {args.command}")
    except UserError as exc:
        print(f"kernelize: error: {exc}", file=sys.stderr)
        return USER_ERROR
    except KeyboardInterrupt:
        print("kernelize: interrupted", file=sys.stderr)
        return 130
    except Exception:
        print("kernelize: internal error (please report this):", file=sys.stderr)
        traceback.print_exc()
        return INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
