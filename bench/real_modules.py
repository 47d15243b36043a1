"""Real model code, run the way a pull request runs it: zero config, the module's own file.

The corpus is the modules a pull request typically touches (norms, activations, MLPs, attention,
rotary embeddings), taken from the installed ``transformers`` (its files as they ship: relative
imports, config-object constructors, decorators). Each class goes through ``kernelize run
FILE::Class --json`` on this machine's default portfolio (on CPU: the template generator, checked
through Triton's interpreter), one class per run, several runs side by side.

    .venv/bin/python bench/real_modules.py [--jobs 2] [--only llama,gpt2] [--markdown out.md]

Prints, per module, whether it was built (and how) and verified (or why not), then the share
verified per kind; ``--markdown`` writes the same table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (file under the transformers package, class, kind)
CORPUS: list[tuple[str, str, str]] = [
    *(
        ("activations.py", name, "activation")
        for name in (
            "GELUTanh",
            "NewGELUActivation",
            "GELUActivation",
            "SiLUActivation",
            "FastGELUActivation",
            "QuickGELUActivation",
            "ClippedGELUActivation",
            "AccurateGELUActivation",
            "MishActivation",
            "LaplaceActivation",
            "ReLUSquaredActivation",
            "SqrtSoftplusActivation",
        )
    ),
    ("models/llama/modeling_llama.py", "LlamaRMSNorm", "norm"),
    ("models/mistral/modeling_mistral.py", "MistralRMSNorm", "norm"),
    ("models/qwen2/modeling_qwen2.py", "Qwen2RMSNorm", "norm"),
    ("models/gemma/modeling_gemma.py", "GemmaRMSNorm", "norm"),
    ("models/phi3/modeling_phi3.py", "Phi3RMSNorm", "norm"),
    ("models/t5/modeling_t5.py", "T5LayerNorm", "norm"),
    ("models/llama/modeling_llama.py", "LlamaMLP", "mlp"),
    ("models/mistral/modeling_mistral.py", "MistralMLP", "mlp"),
    ("models/qwen2/modeling_qwen2.py", "Qwen2MLP", "mlp"),
    ("models/gemma/modeling_gemma.py", "GemmaMLP", "mlp"),
    ("models/phi3/modeling_phi3.py", "Phi3MLP", "mlp"),
    ("models/gpt2/modeling_gpt2.py", "GPT2MLP", "mlp"),
    ("models/gpt_neox/modeling_gpt_neox.py", "GPTNeoXMLP", "mlp"),
    ("models/t5/modeling_t5.py", "T5DenseActDense", "mlp"),
    ("models/t5/modeling_t5.py", "T5DenseGatedActDense", "mlp"),
    ("models/bert/modeling_bert.py", "BertIntermediate", "mlp"),
    ("models/bert/modeling_bert.py", "BertPredictionHeadTransform", "mlp"),
    ("models/llama/modeling_llama.py", "LlamaRotaryEmbedding", "rotary"),
    ("models/qwen2/modeling_qwen2.py", "Qwen2RotaryEmbedding", "rotary"),
    ("models/gpt_neox/modeling_gpt_neox.py", "GPTNeoXRotaryEmbedding", "rotary"),
    ("models/llama/modeling_llama.py", "LlamaAttention", "attention"),
    ("models/gpt2/modeling_gpt2.py", "GPT2Attention", "attention"),
    ("models/bert/modeling_bert.py", "BertSelfAttention", "attention"),
    ("models/t5/modeling_t5.py", "T5Attention", "attention"),
]


@dataclass
class Outcome:
    target: str
    kind: str
    built: str  # how ("guess", "config", "kernelbench") or "no"
    verified: bool
    why: str
    wall_s: float


def _package() -> Path:
    import transformers

    return Path(transformers.__file__).resolve().parent


def run_one(file: Path, cls: str, kind: str, out: Path, timeout: int) -> Outcome:
    report = out / f"{file.stem}.{cls}.json"
    start = time.monotonic()
    cmd = [sys.executable, "-m", "bot.cli", "run", f"{file}::{cls}", "--json", str(report), "--quiet"]
    cmd += ["--timeout", str(timeout)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False)
    wall = time.monotonic() - start
    target = f"transformers/{file.relative_to(_package()).as_posix()}::{cls}"
    if not report.is_file():
        last = (done.stderr.strip().splitlines() or ["no report"])[-1]
        return Outcome(target, kind, "no", False, last.removeprefix("kernelize: error: "), wall)
    [module] = json.loads(report.read_text())["modules"]
    built = module.get("build_source") or "no"
    if module["status"] != "ok":
        return Outcome(target, kind, "no", False, module.get("reason") or module["status"], wall)
    best = next((c for c in module["candidates"] if c["id"] == module.get("best")), None)
    if best is not None:
        return Outcome(target, kind, built, True, f"{best['generator']}: {best['id']}", wall)
    first = module["candidates"][0] if module["candidates"] else None
    why = f"{first['status']}: {first['reason']}" if first else "no candidate"
    return Outcome(target, kind, built, False, why.removeprefix("error: "), wall)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated substrings of the file paths")
    parser.add_argument("--timeout", type=int, default=300, help="per candidate, as kernelize run")
    parser.add_argument("--markdown", metavar="PATH")
    args = parser.parse_args(argv)
    package = _package()
    wanted = [w for w in args.only.split(",") if w]
    corpus = [c for c in CORPUS if not wanted or any(w in c[0] for w in wanted)]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        jobs = [pool.submit(run_one, package / f, c, k, Path(tmp), args.timeout) for f, c, k in corpus]
        outcomes = [j.result() for j in jobs]
    lines = [
        "| module | kind | built | verified | why not / winner | wall s |",
        "|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        why = o.why.replace("|", "\\|")[:160]
        verified = "yes" if o.verified else "no"
        lines.append(f"| `{o.target}` | {o.kind} | {o.built} | {verified} | {why} | {o.wall_s:.0f} |")
    kinds = dict.fromkeys(o.kind for o in outcomes)
    lines.append("")
    for kind in kinds:
        of = [o for o in outcomes if o.kind == kind]
        lines.append(f"- {kind}: {sum(o.verified for o in of)} of {len(of)} verified")
    total = sum(o.verified for o in outcomes)
    lines.append(f"- all: {total} of {len(outcomes)} verified ({100 * total / max(len(outcomes), 1):.0f}%)")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
