"""``kernelize run --generator openai`` against a real local server speaking the OpenAI API."""

from __future__ import annotations

import json
from pathlib import Path

from fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-test-0123456789-secret"
SOFTMAX_OK = (ROOT / "tests/candidates/softmax/ok.py").read_text()


def test_openai_generator_end_to_end(cli, tmp_path):
    report = tmp_path / "r.json"
    with FakeOpenAI(api_key=KEY) as fake:
        fake.plan(
            choices=[
                ("Here is the kernel:\n```python\n" + SOFTMAX_OK + "```\n", "stop"),
                ("```python\nimport torch\nclass ModelNew(torch.nn.Module):\n", "length"),
            ]
        )
        rc, out, err = cli(
            [
                "run",
                "tests/problems/softmax.py",
                "--generator",
                "openai",
                "--api-base",
                fake.base_url,
                "--model",
                "kernel-llm",
                "--samples",
                "2",
                "--api-key-env",
                "KZ_TEST_KEY",
                "--json",
                str(report),
            ],
            env={"KZ_TEST_KEY": KEY},
        )
        [request] = fake.requests
    assert rc == 0, err
    assert request.path == "/v1/completions"
    assert request.body["n"] == 2 and request.body["model"] == "kernel-llm"
    assert request.body["prompt"].startswith("<|begin_of_text|>You write custom Triton kernels")
    assert "class Model(nn.Module)" in request.body["prompt"]
    [module] = json.loads(report.read_text())["modules"]
    first, second = module["candidates"]
    assert (first["id"], first["status"]) == ("openai-1", "correct"), first["reason"]
    assert second["status"] == "error" and "cut off" in second["reason"]
    assert module["best"] == "openai-1"
    everything = report.read_text() + out + err
    assert KEY not in everything


def test_unreachable_server_is_a_clear_user_error(cli):
    rc, _out, err = cli(
        [
            "run",
            "tests/problems/softmax.py",
            "--generator",
            "openai",
            "--api-base",
            "http://127.0.0.1:9/v1",
            "--timeout",
            "60",  # the module's build runs under it too: 5 s was too little on a loaded machine
        ],
    )
    assert rc == 2, err
    [line] = err.strip().splitlines()[-1:]
    assert line.startswith("kernelize: error: generator: POST http://127.0.0.1:9/v1/completions")
    assert "Traceback" not in err
