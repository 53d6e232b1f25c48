"""Per-phase time of one GRPO step on the reference CPU workload, through the real trainer (Ray Train + Serve + vLLM).

Workload: SmolLM2-135M-Instruct, LoRA r=16 on all linear layers, 8 GSM8K prompts × 4 samples × 64 response tokens,
KL loss `low_var_kl` at 0.04. Target on a 2-core machine: a whole step in at most 17.5 s (a third of TRL 1.16's
GRPOTrainer with bf16 and no gradient checkpointing: 54.8 s on a box with ~800 GFLOP/s bf16 matmuls).

    python bench/step.py [--gsm8k-dir ../shared/data/gsm8k] [--steps 4] [key=value overrides ...]
    python bench/step.py --compare-async [--steps 4]

Step 1 carries one-off warm-up (first compile of kernels, first adapter load), so the table averages steps 2..N and
prints step 1 beside it.

`--compare-async` runs the workload twice on separate resources (one core for vLLM, one for the trainer), first
synchronous, then with `async_training` (generation of the next batch overlapping this update, token-level IS), and
prints both step times with the speedup the phase times predict: a synchronous step costs gen + train, an
overlapped one max(gen, train), train being everything else the step does.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's app/ and serve/, not an installed copy's
CACHE = REPO / ".cache" / "bench"
TARGET_S = 17.5
PHASES = ["gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "sync", "step"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gsm8k-dir", type=Path, default=REPO.parent / "shared" / "data" / "gsm8k")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--compare-async", action="store_true", help="sync vs async_training side by side")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. trainer.num_workers=2")
    args = parser.parse_args()

    from app.config import compose_run_config
    from app.import_model import import_model
    from app.prepare import main as prepare
    from app.trainer.launch import train
    from app.trainer.tracking import read_metrics

    model = import_model("smollm2-135m-instruct", CACHE / "smollm2-135m-instruct")
    data = CACHE / "gsm8k"
    if not (data / "train.parquet").is_file():
        assert prepare(["gsm8k", "--input", str(args.gsm8k_dir), "--output", str(data)]) == 0
    out = CACHE / "step-run"
    import shutil

    overrides = [
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={data / 'train.parquet'}",
        "data.val_files=''",
        "data.train_batch_size=8",
        "data.max_prompt_length=320",
        "data.max_response_length=64",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.model.lora_rank=16",
        "actor_rollout_ref.model.lora_alpha=32",
        "actor_rollout_ref.model.target_modules=all-linear",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.kl_loss_coef=0.04",
        "actor_rollout_ref.actor.optim.lr=1e-5",
        # how this repository runs it on a 2-core box (the make-run settings): merged LoRA sync, so vLLM generates
        # without its slow CPU LoRA kernels, and both cores for vLLM's threads while the trainer waits
        "actor_rollout_ref.rollout.lora_sync=merged",
        "actor_rollout_ref.rollout.omp_threads=2",
        "trainer.num_workers=1",
        "trainer.cpus_per_worker=2",
        f"trainer.total_training_steps={args.steps}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[jsonl]",
        *args.overrides,
    ]

    def run(extra: list[str], name: str) -> list[dict]:
        shutil.rmtree(out / name, ignore_errors=True)
        cfg = compose_run_config(
            "grpo_trainer",
            [*overrides, *extra, f"trainer.default_local_dir={out / name}", f"trainer.experiment_name=bench-{name}"],
        )
        train(cfg)
        return [r for r in read_metrics(out / name / "metrics.jsonl") if r.get("step", 0) >= 1]

    if args.compare_async:
        return compare_async(run)
    rows = run([], "step")
    first, rest = rows[0], rows[1:] or rows[:1]
    print(f"\nGRPO step on SmolLM2-135M, LoRA r=16, 8 prompts x 4 samples x 64 tokens ({len(rest)} steps averaged)")
    print(f"{'phase':<14}{'step 1 (s)':>12}{'steps 2+ (s)':>14}{'share':>8}")
    step_mean = statistics.mean(r["timing_s/step"] for r in rest)
    for phase in PHASES:
        key = f"timing_s/{phase}"
        if key not in first:
            continue
        mean = statistics.mean(r.get(key, 0.0) for r in rest)
        print(f"{phase:<14}{first[key]:>12.2f}{mean:>14.2f}{mean / step_mean:>8.0%}")
    tokens = statistics.mean(r["response_length/mean"] * 32 for r in rest)
    gen = statistics.mean(r["timing_s/gen"] for r in rest)
    print(
        f"rollout: {tokens / gen:.0f} generated tokens/s; whole step: "
        f"{statistics.mean(r['perf/throughput'] for r in rest):.0f} tokens/s (prompt+response)"
    )
    verdict = "met" if step_mean <= TARGET_S else "NOT met"
    print(f"step time {step_mean:.1f} s against the {TARGET_S} s target: {verdict}")
    return 0


# one core each, so generation and the update can really run at once on a 2-core box
SPLIT = [
    "actor_rollout_ref.rollout.omp_threads=1",
    "actor_rollout_ref.rollout.cpus_per_replica=1",
    "trainer.cpus_per_worker=1",
]
ASYNC = ["async_training.enable=true", "algorithm.rollout_correction.rollout_is=token"]


def compare_async(run) -> int:
    sync, overlapped = run(SPLIT, "sync"), run(SPLIT + ASYNC, "async")

    def mean(rows: list[dict], key: str) -> float:
        rest = rows[1:] or rows
        return statistics.mean(r.get(key, 0.0) for r in rest)

    sync_step, async_step = mean(sync, "timing_s/step"), mean(overlapped, "timing_s/step")
    gen = mean(sync, "timing_s/gen")
    rest = sync_step - gen
    print(f"\nGRPO step, sync vs async_training (one core for vLLM, one for the trainer; steps 2..{len(sync)})")
    print(f"{'':<28}{'sync':>10}{'async':>10}")
    print(f"{'step (s)':<28}{sync_step:>10.2f}{async_step:>10.2f}")
    print(f"{'generation (s)':<28}{gen:>10.2f}{mean(overlapped, 'timing_s/gen'):>10.2f}")
    print(f"{'  of it overlapped (s)':<28}{0.0:>10.2f}{mean(overlapped, 'timing_s/gen_overlap'):>10.2f}")
    print(f"{'  waited for (s)':<28}{gen:>10.2f}{mean(overlapped, 'timing_s/gen_wait'):>10.2f}")
    print(
        f"measured speedup: {sync_step / async_step:.2f}x; predicted (gen + train) / max(gen, train) from the sync "
        f"phases = ({gen:.1f} + {rest:.1f}) / {max(gen, rest):.1f} = {sync_step / max(gen, rest):.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
