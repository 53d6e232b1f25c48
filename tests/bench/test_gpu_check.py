"""bench/gpu_check.sh end to end on the CPU (tiny shapes), with Ray, vLLM, Hydra, OmegaConf, DeepSpeed and
flash-attn made unimportable, as on the bare GPU machine the lead runs it on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ABSENT = ("ray", "vllm", "hydra", "omegaconf", "deepspeed", "flash_attn")


def test_gpu_check_runs_on_cpu_without_the_cluster_packages(tmp_path):
    blocker = tmp_path / "site"
    blocker.mkdir()
    # a None entry in sys.modules makes `import name` raise ImportError, as if the package were not installed
    (blocker / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in ABSENT)
    )
    out = tmp_path / "out"
    env = {
        **os.environ,
        "OUT": str(out),
        "PYTHON": sys.executable,
        "PYTHONPATH": str(blocker),
        "RAYRL_BENCH_CACHE": str(tmp_path / "models"),
    }
    result = subprocess.run(
        ["bash", "bench/gpu_check.sh", "--cpu-tiny"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    log = (out / "gpu_check.log").read_text() if (out / "gpu_check.log").is_file() else result.stdout
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == ["info", "attention", "engine", "mfu-tiny"], log[-3000:]
    assert all(s["rc"] == 0 for s in steps), (steps, log[-5000:])
    info = json.loads((out / "info.json").read_text())
    assert info["packed_attention_kernel"] == "per_sequence" and not info["cuda_available"]
    engine = json.loads((out / "engine.json").read_text())
    assert engine["ok"] and all(engine["checks"].values()), engine
    assert engine["backend"] == "gloo" and engine["param_devices"] == ["cpu"]
    assert engine["log_prob_max_abs_diff"] < 1e-4  # fp32 on the CPU: the engine's packed forward is the reference's
    attention = json.loads((out / "attention.json").read_text())
    assert attention["ok"] and set(attention["cases"]) == {"plain", "shared_prompt"}
    assert attention["kernels"] == ["flex", "per_sequence"]  # the varlen kernel is CUDA's alone
    [mfu] = [json.loads(line) for line in (out / "mfu.jsonl").read_text().splitlines()]
    assert mfu["preset"] == "tiny" and mfu["mfu"] > 0
    summary = (out / "summary.md").read_text()
    assert "| mfu-tiny | 0 |" in summary and "| tiny |" in summary and "ok=True" in summary
