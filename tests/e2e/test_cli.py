"""The real ``kernelize run`` CLI, end to end, on CPU (Triton interpreter, untimed).

Every CLI invocation runs once, in a module-scoped fixture, and the tests
read its JSON report. Each sandboxed evaluation starts a fresh Python that
imports torch and Triton (~4 s), so the add_relu run alone takes ~90 s.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shutil
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
import triton

from runners.apply import unique_helpers
from runners.fallback import with_original_path
from runners.normalize import normalize
from runners.results import REPORT_VERSION, report_from_dict, to_dict

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ROOT / "tests" / "problems"
CANDIDATES = ROOT / "tests" / "candidates"


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    report: dict[str, Any] = field(default_factory=dict)
    markdown: str = ""
    json_text: str = ""

    def module(self, class_name: str) -> dict[str, Any]:
        return next(m for m in self.report["modules"] if m["class_name"] == class_name)

    def candidates(self, class_name: str = "Model") -> dict[str, dict[str, Any]]:
        return {c["id"]: c for c in self.module(class_name)["candidates"]}


def kernelize(
    cli, out_dir: Path, args: list[str], env: dict[str, str] | None = None, markdown: bool = False
) -> Run:
    json_path = out_dir / "report.json"
    extra = ["--json", str(json_path)]
    if markdown:
        extra += ["--markdown", str(out_dir / "report.md")]
    rc, stdout, stderr = cli(["run", *args, *extra], env=env)
    run = Run(rc, stdout, stderr)
    if json_path.exists():
        run.json_text = json_path.read_text(encoding="utf-8")
        run.report = json.loads(run.json_text)
    if markdown and (out_dir / "report.md").exists():
        run.markdown = (out_dir / "report.md").read_text(encoding="utf-8")
    return run


def assert_user_error(rc: int, stdout: str, stderr: str, *fragments: str) -> str:
    assert rc == 2, (stdout, stderr)
    assert "Traceback" not in stderr and "Traceback" not in stdout
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("kernelize: error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


# ---------------------------------------------------------------------------
# add_relu: the whole zoo of candidates, one run


@pytest.fixture(scope="module")
def add_relu(cli, tmp_path_factory) -> Run:
    out = tmp_path_factory.mktemp("add_relu")
    return kernelize(
        cli,
        out,
        [
            "tests/problems/add_relu.py",
            "--candidates",
            "tests/candidates/add_relu",
            "--timeout",
            "20",
            "--memory",
            "4096",
        ],
        markdown=True,
    )


ADD_RELU_FILES = sorted(p.name for p in (CANDIDATES / "add_relu").glob("*.py"))


def test_add_relu_run_completes(add_relu):
    assert add_relu.rc == 0, add_relu.stderr
    assert "Traceback" not in add_relu.stderr
    assert add_relu.report["version"] == REPORT_VERSION == 1
    m = add_relu.module("Model")
    assert m["target"] == "tests/problems/add_relu.py::Model"
    assert m["file"] == "tests/problems/add_relu.py"
    assert m["status"] == "ok"
    assert m["build_source"] == "kernelbench"
    assert m["inputs"] == [{"shape": [16, 100], "dtype": "float32"}] * 2
    assert m["init_args"] == [] and m["init_kwargs"] == {}
    assert m["baselines"] == {
        "eager_ms": None,
        "compile_ms": None,
        "compile_error": None,
        "training_eager_ms": None,
        "training_compile_ms": None,
    }
    assert m["best"] == "ok.py"
    assert sorted(add_relu.candidates()) == ADD_RELU_FILES  # each file evaluated exactly once
    assert len(m["candidates"]) == len(ADD_RELU_FILES)


def test_add_relu_device_is_the_cpu_interpreter(add_relu):
    dev = add_relu.report["device"]
    assert dev["kind"] == "cpu"
    assert dev["interpreter"] is True
    assert dev["torch"] == torch.__version__
    assert dev["triton"] == triton.__version__
    assert dev["name"]


def test_ok_is_correct(add_relu):
    ok = add_relu.candidates()["ok.py"]
    assert ok["status"] == "correct", ok["reason"]
    assert ok["reason"] == ""
    assert ok["generator"] == "files"
    # The judge's large-magnitude family makes the absolute error grow with the values (x + y
    # rounded to float32 at 1e4 is off by ~1e-3); relative to the reference it stays at rounding.
    assert ok["max_abs_error"] is not None and ok["max_abs_error"] < 1e-2
    assert ok["max_rel_error"] is not None and ok["max_rel_error"] < 1e-6
    assert ok["triton_launches"] >= 1
    assert ok["torch_ops_kept"] == []
    # CPU: nothing is timed.
    assert ok["median_ms"] is None
    assert ok["speedup_vs_eager"] is None and ok["speedup_vs_compile"] is None
    assert ok["verdict"] == "not measured"
    assert ok["timings"] == {}
    # Three seeds at the example's shape, then the other shapes.
    assert ok["shapes_checked"][:3] == [[[16, 100], [16, 100]]] * 3
    for variant in ([[32, 100], [32, 100]], [[16, 151], [16, 151]], [[25, 100], [25, 100]]):
        assert variant in ok["shapes_checked"]
    # The checksum is of the code as verified and suggested: normalized (ModelNew renamed to Model),
    # its helpers named for the class, with the original path kept.
    original = (PROBLEMS / "add_relu.py").read_text()
    verified = normalize((CANDIDATES / "add_relu" / "ok.py").read_text(), "Model").source
    verified = with_original_path(unique_helpers(verified, "Model", original), original, "Model")
    assert ok["source_sha256"] == hashlib.sha256(verified.encode()).hexdigest()
    assert ok["provenance"]["rewrites"] == ["renamed ModelNew to Model"]


EXPECTED_ADD_RELU = [
    # (candidate, status, fragments of the reason, in order)
    ("wrong.py", "incorrect", ["seed 0", "max abs error", "(float32)"]),
    (
        "decoration.py",
        "rejected",
        ["check 5", "every PyTorch compute op", "(add, relu)", "decoration"],
    ),
    # The same, with the PyTorch ops inside a custom op: the recorder looks inside it.
    ("ops_inside_custom_op.py", "rejected", ["check 5", "every PyTorch compute op", "(add, relu)"]),
    ("no_kernel.py", "rejected", ["check 5", "no Triton kernel was launched", "seed 0"]),
    # Its leading guard refuses every input, which the suggestion routes to the original computation.
    ("guarded_away.py", "rejected", ["check 5", "no Triton kernel was launched", "seed 0"]),
    ("mutate.py", "rejected", ["check 4", "modifies input 0 in place", "seed 0"]),
    (
        "reused_buffer.py",
        "rejected",
        ["check 4", "same output memory as an earlier call", "seed 1"],
    ),
    # cached.py replays its first answer: the second call launches nothing, so check 5
    # rejects it (before the numbers could expose it).
    ("cached.py", "rejected", ["check 5", "no Triton kernel was launched", "seed 1"]),
    # Past its baked-in 1600 elements the output is uninitialised memory: the evidence is
    # garbage (a huge error or NaN), but always at the doubled batch.
    ("baked_shape.py", "incorrect", ["shape [[32, 100], [32, 100]]: output: "]),
    ("infinite_loop.py", "timeout", ["check 7", "exceeded the 20 s time limit"]),
    ("abort.py", "crashed", ["check 7", "SIGABRT"]),
    ("segfault.py", "crashed", ["check 7", "SIGSEGV"]),
    ("imports_os.py", "rejected", ["not standalone", "line 24", "imports os"]),
    ("needs_cuda.py", "error", ["needs a CUDA device", "CUDA"]),
]


@pytest.mark.parametrize(
    ("name", "status", "fragments"), EXPECTED_ADD_RELU, ids=[e[0] for e in EXPECTED_ADD_RELU]
)
def test_add_relu_candidate_verdict(add_relu, name, status, fragments):
    c = add_relu.candidates()[name]
    assert c["status"] == status, c["reason"]
    pos = 0
    for fragment in fragments:
        found = c["reason"].find(fragment, pos)
        assert found >= 0, f"{fragment!r} not in {c['reason']!r}"
        pos = found
    # A failed candidate carries no measurements and is never the best.
    assert c["median_ms"] is None and c["speedup_vs_eager"] is None
    assert add_relu.module("Model")["best"] != name


def test_memory_hog_breaks_the_memory_limit(add_relu):
    c = add_relu.candidates()["memory_hog.py"]
    assert c["status"] in ("error", "crashed")
    assert "memory" in c["reason"]
    assert "check 7" in c["reason"]


def test_timeout_is_enforced_promptly(add_relu):
    c = add_relu.candidates()["infinite_loop.py"]
    assert 20 <= c["wall_s"] < 35


def test_add_relu_stdout_table_and_progress(add_relu):
    assert "ok.py *" in add_relu.stdout  # the best is starred
    assert "not timed (no GPU): Triton interpreter" in add_relu.stdout
    assert (
        "kernelize: tests/problems/add_relu.py::Model: building the module and its inputs" in add_relu.stderr
    )
    assert f"files gave {len(ADD_RELU_FILES)} candidate(s)" in add_relu.stderr


def test_markdown_report(add_relu):
    md = add_relu.markdown
    assert md.startswith("# Kernelize report")
    assert (
        "| candidate | generator | status | max abs err | ms | vs eager | vs compile | training | "
        "torch.compile | PyTorch ops kept | notes |"
    ) in md
    assert "not measured" in md
    assert "## `tests/problems/add_relu.py::Model`" in md
    assert "| **ok.py** | files | correct |" in md
    assert "Best: **ok.py**." in md


CANDIDATE_KEYS = {
    "id",
    "generator",
    "status",
    "reason",
    "max_abs_error",
    "max_rel_error",
    "median_ms",
    "speedup_vs_eager",
    "speedup_vs_compile",
    "torch_ops_kept",
    "source_sha256",
}
MODULE_KEYS = {
    "target",
    "file",
    "class_name",
    "init_args",
    "inputs",
    "baselines",
    "candidates",
    "best",
}


def test_json_report_schema(add_relu):
    d = add_relu.report
    assert d["version"] == 1
    assert {"version", "device", "modules"} <= set(d)
    assert {"kind", "name", "torch", "triton"} <= set(d["device"])
    assert len(d["modules"]) == 1
    m = d["modules"][0]
    assert set(m) >= MODULE_KEYS
    assert {"eager_ms", "compile_ms"} <= set(m["baselines"])
    for t in m["inputs"]:
        assert set(t) == {"shape", "dtype"}
    for c in m["candidates"]:
        assert set(c) >= CANDIDATE_KEYS, c["id"]
        assert len(c["source_sha256"]) == 64
        assert isinstance(c["torch_ops_kept"], list)


def test_json_report_round_trips(add_relu):
    report = report_from_dict(add_relu.report)
    assert to_dict(report) == add_relu.report
    assert report.modules[0].best_candidate() is not None
    assert report.modules[0].best_candidate().id == "ok.py"
    with pytest.raises(ValueError, match="report version 2 is not 1"):
        report_from_dict({**add_relu.report, "version": 2})


# ---------------------------------------------------------------------------
# Hostile candidates: secrets, network, a blinded checker


CANARY = '''
import torch
import triton


class ModelNew(torch.nn.Module):
    """Looks for the parent's secrets and reports them in its exception and on stdout.

    Reads torch.os.environ via getattr: the literal attribute would be refused by
    the static screen before anything ran.
    """

    def forward(self, x, y):
        os_ = torch.os
        env = getattr(os_, "env" + "iron")
        found = ["env:" + repr(env.get("KERNELIZE_CANARY"))]
        dump = repr(dict(env))
        try:
            fd = os_.open("/proc/%d/environ" % os_.getppid(), os_.O_RDONLY)
            data = b""
            while True:
                chunk = os_.read(fd, 65536)
                if not chunk:
                    break
                data += chunk
            os_.close(fd)
            hits = [v for v in data.split(b"\\0") if v.startswith(b"KERNELIZE_CANARY")]
            found.append("parent:" + repr(hits))
            dump += repr(data)
        except OSError as exc:
            found.append("parent:" + type(exc).__name__)
        print("CANARY-DUMP", " ".join(found), dump)
        raise RuntimeError("CANARY-PROBE " + " ".join(found))
'''

NETWORK = """
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        reply = torch.hub.urlopen("http://127.0.0.1:{port}/", timeout=5).read()
        raise RuntimeError("NETWORK-PROBE reached the listener: " + repr(reply))
"""


@pytest.fixture(scope="module")
def hostile(cli, tmp_path_factory, start_listener) -> tuple[Run, str, Any]:
    out = tmp_path_factory.mktemp("hostile")
    cands = out / "candidates"
    cands.mkdir()
    listener = start_listener()
    (cands / "canary.py").write_text(textwrap.dedent(CANARY))
    (cands / "network.py").write_text(NETWORK.format(port=listener.port))
    shutil.copy(CANDIDATES / "exploits" / "blind_abs.py", cands / "blind_abs.py")
    token = "kz-canary-" + secrets.token_hex(16)
    run = kernelize(
        cli,
        out,
        [
            "tests/problems/add_relu.py",
            "--candidates",
            str(cands),
            "--timeout",
            "60",
            "--memory",
            "4096",
        ],
        env={"KERNELIZE_CANARY": token},
        markdown=True,
    )
    return run, token, listener


def test_canary_secret_never_leaks(hostile):
    run, token, _ = hostile
    assert run.rc == 0, run.stderr
    c = run.candidates()["canary.py"]
    # The probe really ran: it got past the static screen and reported what it found.
    assert c["status"] == "error"
    # Its parent in the sandbox's pid namespace is bwrap's init, started with the allow-listed
    # environment only: readable, and without the canary.
    assert "CANARY-PROBE env:None parent:[]" in c["reason"]
    assert "CANARY-DUMP" in c["stdout_tail"]
    # And found nothing, anywhere.
    for where, text in (
        ("json", run.json_text),
        ("markdown", run.markdown),
        ("stdout", run.stdout),
        ("stderr", run.stderr),
    ):
        assert text, where
        assert token not in text, f"the canary leaked into the CLI's {where}"


def test_network_is_unreachable(hostile):
    run, _, listener = hostile
    c = run.candidates()["network.py"]
    assert c["status"] == "error"
    assert "network access is disabled in the sandbox" in c["reason"]
    assert "NETWORK-PROBE" not in c["reason"]
    assert listener.accepted == []


def test_checker_cannot_be_blinded_by_shadowing_tensor_abs(hostile):
    run, _, _ = hostile
    c = run.candidates()["blind_abs.py"]
    assert c["status"] == "rejected", f"wrong kernel judged {c['status']}"
    assert c["reason"].startswith("check 6"), c["reason"]


# ---------------------------------------------------------------------------
# softmax and matmul


@pytest.fixture(scope="module")
def softmax(cli, tmp_path_factory) -> Run:
    return kernelize(
        cli,
        tmp_path_factory.mktemp("softmax"),
        [
            "tests/problems/softmax.py",
            "--candidates",
            "tests/candidates/softmax",
            "--timeout",
            "120",
        ],
    )


@pytest.fixture(scope="module")
def matmul(cli, tmp_path_factory) -> Run:
    return kernelize(
        cli,
        tmp_path_factory.mktemp("matmul"),
        ["tests/problems/matmul.py", "--candidates", "tests/candidates/matmul", "--timeout", "120"],
    )


def test_softmax_ok_is_correct(softmax):
    assert softmax.rc == 0, softmax.stderr
    c = softmax.candidates()["ok.py"]
    assert c["status"] == "correct", c["reason"]
    assert c["max_abs_error"] < 1e-5
    assert [[16, 96]] in c["shapes_checked"]  # batch doubled
    assert [[8, 145]] in c["shapes_checked"]  # odd row length: the mask is exercised
    assert softmax.module("Model")["best"] == "ok.py"


def test_matmul_ok_is_correct(matmul):
    assert matmul.rc == 0, matmul.stderr
    m = matmul.module("Model")
    assert m["inputs"] == [
        {"shape": [32, 48], "dtype": "float32"},
        {"shape": [48, 40], "dtype": "float32"},
    ]
    c = matmul.candidates()["ok.py"]
    assert c["status"] == "correct", c["reason"]
    assert c["triton_launches"] >= 1
    assert [[32, 73], [73, 40]] in c["shapes_checked"]  # the shared K changed in both operands
    assert m["best"] == "ok.py"


# ---------------------------------------------------------------------------
# layers.py: modules as people write them


@pytest.fixture(scope="module")
def layers(cli, tmp_path_factory) -> Run:
    return kernelize(
        cli,
        tmp_path_factory.mktemp("layers"),
        ["tests/problems/layers.py", "--candidates", "tests/candidates/layers", "--timeout", "120"],
    )


def test_layers_run_covers_every_class(layers):
    assert layers.rc == 0, layers.stderr  # one module skipped is not a failed run
    assert [m["class_name"] for m in layers.report["modules"]] == [
        "RMSNorm",
        "GatedMLP",
        "Block",
        "NeedsConfig",
    ]


def test_rmsnorm_built_by_guess_and_ok_is_correct(layers):
    m = layers.module("RMSNorm")
    assert m["status"] == "ok"
    assert m["build_source"] == "guess"
    assert m["init_kwargs"] == {"dim": 64}
    assert m["inputs"] == [{"shape": [2, 16, 64], "dtype": "float32"}]
    ok = layers.candidates("RMSNorm")["ok.py"]
    assert ok["status"] == "correct", ok["reason"]
    assert m["best"] == "ok.py"


def test_rmsnorm_renamed_weight_is_rejected(layers):
    c = layers.candidates("RMSNorm")["renamed_weight.py"]
    assert c["status"] == "rejected"
    assert c["reason"].startswith("check 1: ")
    assert "state_dict" in c["reason"]
    assert '"scale"' in c["reason"] and '"weight"' in c["reason"]


def test_rmsnorm_with_renamed_constructor_arguments_builds_positionally(layers):
    c = layers.candidates("RMSNorm")["renamed_args.py"]
    assert c["status"] == "correct", c["reason"]


def test_subclass_in_the_same_file_is_built(layers):
    for name in ("GatedMLP", "Block"):
        m = layers.module(name)
        assert m["status"] == "ok"
        assert m["build_source"] == "guess"
        assert m["init_kwargs"] == {"hidden_size": 64, "intermediate_size": 64}
        assert m["candidates"] == []  # no candidate folder for them
        assert m["best"] is None


def test_needs_config_is_skipped_with_a_snippet(layers):
    m = layers.module("NeedsConfig")
    assert m["status"] == "skipped"
    assert "no safe guess for constructor argument 'config'" in m["reason"]
    assert m["candidates"] == []
    assert "def get_inputs():" in m["snippet"]
    assert "tests/problems/layers.py::NeedsConfig:" in m["snippet"]


def test_needs_config_alone_is_a_user_error(cli):
    rc, stdout, stderr = cli(
        [
            "run",
            "tests/problems/layers.py::NeedsConfig",
            "--candidates",
            "tests/candidates/layers",
            "--quiet",
        ]
    )
    line = assert_user_error(
        rc, stdout, stderr, "tests/problems/layers.py::NeedsConfig", "inputs cannot be built"
    )
    assert "'config'" in line
    assert "def get_inputs():" in stdout  # the snippet is shown
    assert "To make tests/problems/layers.py::NeedsConfig buildable" in stdout


# ---------------------------------------------------------------------------
# --config


CONFIG = """\
modules:
  pkg/layers.py::RMSNorm:
    init: [32]
    inputs:
      - {shape: [3, 5, 32], dtype: float32}
"""


@pytest.fixture(scope="module")
def configured(cli, tmp_path_factory) -> Run:
    repo = tmp_path_factory.mktemp("repo")
    (repo / "pkg").mkdir()
    shutil.copy(PROBLEMS / "layers.py", repo / "pkg" / "layers.py")
    (repo / ".github").mkdir()
    (repo / ".github" / "kernelize.yml").write_text(CONFIG)
    return kernelize(
        cli,
        repo,
        [
            f"{repo}/pkg/layers.py::RMSNorm",
            "--config",
            str(repo / ".github" / "kernelize.yml"),
            "--candidates",
            str(CANDIDATES / "layers"),
            "--timeout",
            "120",
            "--quiet",
        ],
    )


def test_config_entry_builds_the_module(configured):
    assert configured.rc == 0, configured.stderr
    assert configured.stderr == ""  # --quiet
    [m] = configured.report["modules"]
    assert m["target"] == "pkg/layers.py::RMSNorm"  # relative to the folder above .github
    assert m["build_source"] == "config"
    assert m["init_args"] == [32]
    assert m["inputs"] == [{"shape": [3, 5, 32], "dtype": "float32"}]
    ok = configured.candidates("RMSNorm")["ok.py"]
    assert ok["status"] == "correct", ok["reason"]
    assert ok["shapes_checked"][0] == [[3, 5, 32]]
    assert [[6, 5, 32]] in ok["shapes_checked"]
    assert all(shape[0][-1] == 32 for shape in ok["shapes_checked"])  # the weight fixes dim


# ---------------------------------------------------------------------------
# User errors: exit 2, one line on stderr, no traceback


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


USER_ERRORS = [
    pytest.param(
        lambda t: ["run", "tests/problems/nope.py"],
        ["tests/problems/nope.py: no such file"],
        id="missing file",
    ),
    pytest.param(
        lambda t: ["run", _write(t, "model.txt", "import torch\n")],
        ["model.txt: not a Python file"],
        id="not .py",
    ),
    pytest.param(
        lambda t: ["run", _write(t, "broken.py", "import torch\n\ndef f(:\n")],
        ["broken.py:3: syntax error"],
        id="syntax error",
    ),
    pytest.param(
        lambda t: ["run", _write(t, "plain.py", "class A:\n    pass\n")],
        ["plain.py: no nn.Module class found"],
        id="no nn.Module",
    ),
    pytest.param(
        lambda t: ["run", "tests/problems/layers.py::Missing"],
        ["no nn.Module class named Missing", "(found: RMSNorm, GatedMLP, Block, NeedsConfig)"],
        id="missing class",
    ),
    pytest.param(
        lambda t: ["run", "tests/problems/layers.py::9lives"],
        ["'9lives' is not a class name"],
        id="bad class name",
    ),
    pytest.param(
        lambda t: [
            "run",
            "tests/problems/layers.py",
            "--config",
            _write(t, ".github/kernelize.yml", CONFIG.replace("float32", "float33")),
        ],
        ["modules.pkg/layers.py::RMSNorm.inputs[0].dtype", "'float33'"],
        id="bad config dtype",
    ),
    pytest.param(
        lambda t: ["run", "tests/problems/layers.py", "--config", str(t / "absent.yml")],
        ["absent.yml: cannot read config"],
        id="missing config",
    ),
    pytest.param(
        lambda t: ["run", "tests/problems/add_relu.py", "--generator", "nope"],
        ["unknown generator 'nope' (available: files, inductor, kernelllm, openai, template)"],
        id="unknown generator",
    ),
    pytest.param(
        lambda t: ["run", "tests/problems/add_relu.py", "--generator", "files"],
        ["no generator can run here: files: the files generator needs --candidates DIR"],
        id="files without --candidates",
    ),
    pytest.param(
        lambda t: ["run", "tests/problems/add_relu.py", "--candidates", str(t / "none")],
        ["none: no such directory"],
        id="missing candidates dir",
    ),
    pytest.param(
        lambda t: ["run", "tests/problems/add_relu.py", "--samples", "0"],
        ["--samples must be at least 1, got 0"],
        id="samples 0",
    ),
    pytest.param(
        lambda t: ["run", "tests/problems/add_relu.py", "--timeout", "0"],
        ["--timeout and --memory must be positive"],
        id="timeout 0",
    ),
    pytest.param(
        lambda t: ["run", "tests/problems/add_relu.py", "--json", str(t / "no" / "r.json")],
        ["the folder does not exist"],
        id="json folder missing",
    ),
    pytest.param(
        lambda t: [
            "run",
            "tests/problems/add_relu.py",
            "--device",
            "cuda",
            "--candidates",
            "tests/candidates/add_relu",
        ],
        ["--device cuda: no CUDA device is available"],
        id="device cuda without CUDA",
        marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA"),
    ),
    pytest.param(
        lambda t: ["run", "tests/problems/add_relu.py", "--bogus"],
        ["unrecognized arguments: --bogus"],
        id="unknown option",
    ),
    pytest.param(lambda t: ["run"], ["the following arguments are required: TARGET"], id="no target"),
    pytest.param(lambda t: [], ["the following arguments are required: command"], id="no command"),
]


@pytest.mark.parametrize(("make_args", "fragments"), USER_ERRORS)
def test_user_errors(cli, tmp_path, make_args, fragments):
    rc, stdout, stderr = cli(make_args(tmp_path))
    assert_user_error(rc, stdout, stderr, *fragments)
    assert stdout == ""


# ---------------------------------------------------------------------------
# The default portfolio: every generator this machine can run, the others named with the reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU portfolio")
def test_default_portfolio_on_cpu_runs_template_and_names_the_rest(cli, tmp_path):
    run = kernelize(cli, tmp_path, ["tests/problems/add_relu.py", "--timeout", "60"], markdown=True)
    assert run.rc == 0, run.stderr
    module = run.module("Model")
    assert {c["generator"] for c in module["candidates"]} == {"template"}
    assert module["best"] == "add_relu_kernel"
    assert set(module["unavailable"]) == {"kernelllm", "inductor"}
    assert module["unavailable"]["inductor"].startswith("needs a CUDA GPU")
    # Where the engine's time went, in the order spent, within its whole time on the module.
    assert list(module["phases"]) == ["build", "generate: template", "checks", "last checks"]
    assert all(s > 0 for s in list(module["phases"].values())[:3])
    # The template's trace runs beside the reference runner, so its time may overlap the build's.
    phases = module["phases"]
    assert sum(v for k, v in phases.items() if k != "generate: template") <= module["wall_s"]
    assert phases["generate: template"] <= module["wall_s"]
    assert "tests/problems/add_relu.py::Model, by generator:" in run.stdout
    assert re.search(r"\n  template +won: the first verified candidate", run.stdout)
    assert re.search(r"\n  inductor +unavailable: needs a CUDA GPU", run.stdout)
    assert "- **template** (1 candidate): won: the first verified candidate" in run.markdown
    assert "- **kernelllm**: unavailable: " in run.markdown


def test_a_named_generator_that_cannot_run_is_listed_and_the_rest_run(cli, tmp_path):
    args = ["tests/problems/add_relu.py", "--generator", "files", "--generator", "template"]
    run = kernelize(cli, tmp_path, args)
    assert run.rc == 0, run.stderr
    module = run.module("Model")
    assert module["unavailable"] == {"files": "the files generator needs --candidates DIR"}
    assert module["best"] == "add_relu_kernel"
    assert re.search(r"\n  files +unavailable: the files generator needs --candidates DIR", run.stdout)


RUNNING_SUM = """import torch
from torch import nn


class RunningSum(nn.Module):
    def forward(self, x):
        return torch.relu(torch.cumsum(x, dim=-1))
"""


def test_a_module_every_generator_declines_is_a_verdict_not_an_error(cli, tmp_path):
    """The run completed: the template generator has no template for a running sum, and says so.
    The README promises exit 0 whatever the verdicts; exit 2 is for what the user must fix."""
    run = kernelize(
        cli, tmp_path, [_write(tmp_path, "running_sum.py", RUNNING_SUM), "--generator", "template"]
    )
    assert run.rc == 0, run.stderr
    [row] = run.module("RunningSum")["candidates"]
    assert row["reason"] == "generator: template: unsupported op torch.cumsum (node 'cumsum')"
    assert re.search(r" template +template +declined +generator: template: unsupported op", run.stdout)
    assert "best candidate" not in run.stdout and "error:" not in run.stderr


GPT = """from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class GPTConfig:
    n_embd: int = 768
    n_head: int = 12
    bias: bool = True


class RMSNorm(nn.Module):
    \"\"\"nanoGPT style: built from the model's config object.\"\"\"

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(config.n_embd))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
"""


@pytest.mark.parametrize(
    ("how", "source", "config", "n_embd"),
    [
        ("guess", GPT, None, 64),
        ("config", GPT, "init: {kwargs: {config: {class: GPTConfig, kwargs: {n_embd: 48}}}}", 48),
        (
            "kernelbench",
            GPT + "\n\ndef get_init_inputs():\n    return [GPTConfig(n_embd=40)]\n\n\n"
            "def get_inputs():\n    return [torch.randn(3, 40)]\n",
            None,
            40,
        ),
    ],
    ids=["guessed", "config entry", "get_init_inputs"],
)
def test_a_module_built_from_a_config_object_is_verified(cli, tmp_path, how, source, config, n_embd):
    """Config-object constructors (``Block(config)``): the object never crosses a process; its
    recipe does ({class, kwargs}), and the sandbox builds it from the file's own class."""
    target = _write(tmp_path, "gpt.py", source) + "::RMSNorm"
    args = [target, "--generator", "template"]
    if config is not None:
        entry = f"    {config}\n    inputs: [{{shape: [2, 8, {n_embd}]}}]\n"
        yml = f"modules:\n  {tmp_path / 'gpt.py'}::RMSNorm:\n{entry}"
        args += ["--config", _write(tmp_path, "kernelize.yml", yml)]
    run = kernelize(cli, tmp_path, args)
    assert run.rc == 0, run.stderr
    module = run.module("RMSNorm")
    assert module["build_source"] == how
    assert module["init_kwargs"].get("config", (module["init_args"] or [None])[0])["class"] == "GPTConfig"
    [c] = module["candidates"]
    assert c["status"] == "correct", c["reason"]
    assert module["inputs"][0]["shape"][-1] == n_embd


NANOGPT_LAYERNORM = """import torch
import torch.nn as nn
from torch.nn import functional as F


class LayerNorm(nn.Module):
    \"\"\" LayerNorm but with an optional bias. PyTorch doesn't support simply bias=False \"\"\"

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)
"""


def test_nanogpts_layernorm_is_verified_with_zero_config(cli, tmp_path):
    """nanoGPT's own LayerNorm: ``ndim`` guessed as a size, ``self.weight.shape`` as the normalized
    shape (the last dimension, the weight being 1-D), its docstring kept in the suggestion."""
    run = kernelize(
        cli,
        tmp_path,
        [_write(tmp_path, "model.py", NANOGPT_LAYERNORM), "--generator", "template", "--show-code"],
    )
    assert run.rc == 0, run.stderr
    module = run.module("LayerNorm")
    assert module["build_source"] == "guess" and module["init_kwargs"] == {"ndim": 64, "bias": True}
    [c] = module["candidates"]
    assert c["status"] == "correct", c["reason"]
    assert c["id"] == "layer_norm_fwd_kernel"
    assert "LayerNorm but with an optional bias" in run.stdout.split("the suggested code", 1)[1]


def test_a_module_of_a_package_resolves_its_relative_imports(cli, tmp_path):
    """A ``src/`` layout: the file imports a sibling relatively and its base class absolutely from
    a file whose class derives from one in a third file: discovery follows the imports (reading,
    not importing) and the module is imported under the folder its package hangs from."""
    pkg = tmp_path / "repo" / "src" / "mymodel"
    _write(pkg, "__init__.py", "")
    _write(pkg, "consts.py", "EPS = 1e-6\n")
    _write(pkg / "layers", "__init__.py", "")
    _write(pkg / "layers", "base.py", "from torch import nn\n\n\nclass Layer(nn.Module):\n    pass\n")
    _write(pkg / "layers", "mid.py", "from .base import Layer\n\n\nclass Norm(Layer):\n    pass\n")
    norm = _write(
        pkg / "layers",
        "norm.py",
        "import torch\n\nfrom mymodel.layers.mid import Norm\nfrom ..consts import EPS\n\n\n"
        "class RMSNorm(Norm):\n    def __init__(self, dim):\n        super().__init__()\n"
        "        self.weight = torch.nn.Parameter(torch.ones(dim))\n\n"
        "    def forward(self, x):\n"
        "        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * self.weight\n",
    )
    run = kernelize(cli, tmp_path, [norm + "::RMSNorm", "--generator", "template"])
    assert run.rc == 0, run.stderr
    module = run.module("RMSNorm")
    assert module["status"] == "ok", module["reason"]
    assert "attempted relative import" not in run.stdout + run.stderr


# ---------------------------------------------------------------------------
# Without a sandbox nothing untrusted runs: one line and exit 2, unless --no-isolation says so


@pytest.mark.parametrize("bwrap", ["/bin/false", "/nonexistent/bwrap"])
def test_no_sandbox_is_a_user_error(cli, tmp_path, bwrap):
    args = ["tests/problems/add_relu.py", "--candidates", "tests/candidates/add_relu", "--quiet"]
    run = kernelize(cli, tmp_path, args, env={"KERNELIZE_BWRAP": bwrap})
    line = assert_user_error(run.rc, run.stdout, run.stderr, "isolation unavailable: ", "--no-isolation")
    assert ("false exited with code 1" if bwrap == "/bin/false" else "not found (install bubblewrap)") in line
    assert run.stdout == "" and run.report == {}  # nothing ran, nothing was written


def test_no_isolation_says_what_it_gives_up(cli, tmp_path):
    rc, stdout, stderr = cli(
        ["run", str(tmp_path / "absent.py"), "--no-isolation"], env={"KERNELIZE_BWRAP": "/bin/false"}
    )
    assert rc == 2 and stdout == ""
    warning, error = stderr.splitlines()
    assert warning.startswith("kernelize: warning: --no-isolation: ") and "without a sandbox" in warning
    assert error == f"kernelize: error: {tmp_path / 'absent.py'}: no such file"


# ---------------------------------------------------------------------------
# together.py: a file's suggestions are checked applied together (runners/together.py)


def test_two_targets_in_one_file_are_checked_applied_together(cli, tmp_path):
    """Scale's and Shift's suggestions each verify alone, but both register the custom op
    kernelize::pointwise: applied together, Shift's serves Scale too, so only Shift's is suggested."""
    folder = tmp_path / "candidates"
    for cls, name in (("Scale", "scale_pointwise.py"), ("Shift", "shift_pointwise.py")):
        (folder / cls).mkdir(parents=True)
        shutil.copy(CANDIDATES / "together" / name, folder / cls / name)
    problem = "tests/problems/together.py"
    run = kernelize(cli, tmp_path, [f"{problem}::Shift", f"{problem}::Scale", "--candidates", str(folder)])
    assert run.rc == 0, run.stderr
    assert [m["class_name"] for m in run.report["modules"]] == ["Shift", "Scale"]  # as asked
    assert run.module("Shift")["best"] == "shift_pointwise.py"
    assert run.module("Scale")["best"] is None and run.module("Scale")["best_source"] is None
    scale = run.candidates("Scale")["scale_pointwise.py"]
    assert scale["status"] == "incorrect"
    assert scale["reason"].startswith(
        "applied together with the suggestion for Shift, this class no longer verifies: "
    )
    assert "checking the suggestions for Scale and Shift applied together" in run.stderr
