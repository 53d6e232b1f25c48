"""The train worker's resident memory over `make run`'s updates, without Ray: oneDNN's default cache against the
bounded one the worker sets (`app.engine.onednn_cache`), with and without the per-step heap trim, and packed
micro-batches rounded to `app.engine.forward.PACKED_MULTIPLE` tokens (as the worker packs them) against unrounded.

    python bench/actor_memory.py [--steps 14] [--settings default,bounded,bounded+trim,bounded+unrounded]
                                 [key=value overrides ...]

Each setting runs in a fresh process: the quickstart's actor (SmolLM2-135M-Instruct, LoRA r16, bf16 where the CPU
has it) takes `--steps` updates on synthetic rollouts of make run's shape (4 prompts of 60-79 tokens x 8 responses of
10-48 tokens, random token ids, seeded, so every setting sees the same batches). Printed per setting: the resident
set after the first and the last update, the highest seen during any update (sampled every 20 ms) and the mean
update time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETTINGS = ("default", "bounded", "bounded+trim", "bounded+unrounded")


def _rollout(rng: random.Random):
    from app.trainer.rollout_batch import build_rollout_batch

    prompts, responses = [], []
    for _ in range(4):
        prompt = [rng.randrange(100, 40000) for _ in range(rng.randrange(60, 80))]
        for _ in range(8):
            prompts.append(prompt)
            responses.append([rng.randrange(100, 40000) for _ in range(rng.randrange(10, 49))])
    batch = build_rollout_batch(prompts, responses, [[-1.0] * len(r) for r in responses], pad_token_id=0)
    batch.meta["temperature"] = 0.7
    return batch


def child(setting: str, steps: int, overrides: list[str]) -> dict:
    from app.engine.onednn_cache import ENV, bound_primitive_cache

    os.environ.pop(ENV, None)
    if setting.startswith("bounded"):
        bound_primitive_cache()  # as app.trainer.launch.worker_entry does, before the first matmul
    import psutil
    import torch

    if setting.endswith("+unrounded"):
        from app.engine import forward

        forward.PACKED_MULTIPLE = 1  # each micro-batch packed to its own length, as before the rounding

    from app.config import compose_run_config
    from app.import_model import import_model
    from app.roles.factory import build_actor
    from serve.memory import release_free_heap

    model = import_model("smollm2-135m-instruct", REPO / ".cache" / "bench" / "smollm2-135m-instruct")
    cfg = compose_run_config("quickstart", [f"actor_rollout_ref.model.path={model}", *overrides])
    torch.set_num_threads(int(cfg.trainer.cpus_per_worker))
    # what app.trainer.setup does: the LR schedule runs over the run's steps (the quickstart's warm-up needs a length)
    cfg.actor_rollout_ref.actor.optim.total_training_steps = cfg.trainer.total_training_steps
    actor = build_actor(cfg.actor_rollout_ref, seed=cfg.trainer.seed)
    proc, peak, sampling = psutil.Process(), [0], [True]

    def sample() -> None:
        while sampling[0]:
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.02)

    threading.Thread(target=sample, daemon=True).start()
    rng, after, seconds = random.Random(0), [], []
    for _ in range(steps):
        batch = _rollout(rng)
        start = time.perf_counter()
        if not actor.is_on_policy(len(batch["responses"])):
            batch.update(actor.compute_log_prob(batch))
        batch["advantages"] = (
            torch.randn(batch["responses"].shape, generator=torch.Generator().manual_seed(0)) * batch["response_mask"]
        )
        actor.update_policy(batch)
        seconds.append(time.perf_counter() - start)
        if setting.endswith("+trim"):
            release_free_heap()  # as the trainer loop did after each step before it stopped trimming (README, speed)
        after.append(proc.memory_info().rss)
    sampling[0] = False
    return {
        "setting": setting,
        "first": after[0],
        "last": after[-1],
        "peak": peak[0],
        "update_s": statistics.mean(seconds[1:] or seconds),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="quickstart overrides, e.g. actor_rollout_ref.model.lora_rank=8")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.overrides)))
        return 0
    settings = args.settings.split(",")
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        parser.error(f"--settings: unknown {unknown}; choose from {', '.join(SETTINGS)}")
    rows = []
    for setting in settings:
        out = subprocess.run(
            [sys.executable, __file__, "--child", setting, "--steps", str(args.steps), *args.overrides],
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"train worker resident set over {args.steps} updates of make run's shape (GiB)")
    print(f"{'setting':<19}{'after 1':>9}{'after ' + str(args.steps):>10}{'peak':>8}{'update s':>10}")
    for r in rows:
        print(
            f"{r['setting']:<19}{r['first'] / 2**30:>9.2f}{r['last'] / 2**30:>10.2f}{r['peak'] / 2**30:>8.2f}"
            f"{r['update_s']:>10.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
