"""Average a LoRA run's adapters over its last checkpoints into one Hugging Face model folder.

A run at a constant lr moves its answers with every update: between two validations the quickstart loses right
answers as it wins others (docs/experiments.md). Averaging the weights of the last steps (stochastic weight averaging,
a "model soup" of one run) is the usual remedy; this builds that model from the checkpoints a run already wrote, so
it can be graded beside the run's own `hf_model` (`bench/sampling_signal.py --model OUT`, whose greedy line is the
run's validation).

    python bench/checkpoint_average.py RUN_DIR --steps 16-20 --lora-alpha 32 --output OUT

RUN_DIR is a run's `trainer.default_local_dir` written with `trainer.save_freq=1` (a `global_step_<N>/actor` folder
per step). Each selected step's adapter is folded into a weight update `lora_alpha / rank * B @ A`; their mean is
added to the base model named in the checkpoint (or `--base`). The products are averaged, not A and B apart: the mean
of two adapters' A and B is not the mean of their updates. Where RUN_DIR holds the run's `hf_model`, the newest
checkpoint's update must reproduce it, which catches a wrong `--lora-alpha` (the quickstart's is 32, from
grpo_trainer.yaml, with rank 16).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

_LORA_A, _LORA_B = ".lora_A.default.weight", ".lora_B.default.weight"


def parse_steps(text: str) -> tuple[int, int]:
    """`A-B` (inclusive) or `N`; SystemExit naming the flag otherwise."""
    first, _, last = text.partition("-")
    try:
        lo, hi = int(first), int(last or first)
    except ValueError:
        raise SystemExit(f"--steps {text!r}: expected A-B or N, e.g. 16-20") from None
    if lo < 1 or hi < lo:
        raise SystemExit(f"--steps {text!r}: expected 1 <= A <= B")
    return lo, hi


def adapter_updates(actor_dir: Path, lora_alpha: float) -> dict[str, torch.Tensor]:
    """`{hf weight name: lora_alpha / rank * B @ A}` (float32) of one checkpoint's actor folder (torch DCP)."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    from app.engine.lora_merge import hf_name

    with tempfile.TemporaryDirectory() as tmp:
        flat = Path(tmp) / "actor.pt"
        dcp_to_torch_save(str(actor_dir), str(flat))
        state = torch.load(flat, weights_only=True)["model"]
    updates = {}
    for name, lora_a in state.items():
        if not name.endswith(_LORA_A):
            continue
        lora_b = state[name[: -len(_LORA_A)] + _LORA_B]
        weight = hf_name(name[: -len(_LORA_A)] + ".base_layer.weight")  # the plain weight it folds into
        updates[weight] = lora_alpha / lora_a.shape[0] * (lora_b.float() @ lora_a.float())
    if not updates:
        raise SystemExit(f"{actor_dir}: no LoRA adapter in this checkpoint; only LoRA runs are averaged here")
    return updates


def average_updates(per_step: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The mean of each weight's updates over the steps given (every step must adapt the same weights)."""
    names = set(per_step[0])
    for updates in per_step[1:]:
        if set(updates) != names:
            raise SystemExit("the checkpoints adapt different weights; were they written by one run?")
    return {name: sum(updates[name] for updates in per_step) / len(per_step) for name in names}


def apply_updates(base: dict, updates: dict) -> dict:
    """Base weights with `updates` added (in float32, then back to each weight's own dtype)."""
    missing = sorted(set(updates) - set(base))
    if missing:
        raise SystemExit(f"the base model has no weight {missing[0]}; is --base the model the run trained?")
    merged = dict(base)
    for name, update in updates.items():
        merged[name] = (base[name].float() + update).to(base[name].dtype)
    return merged


def check_reproduces(merged: dict, exported: dict, base: dict, step: int, lora_alpha: float) -> None:
    """SystemExit unless the newest checkpoint's merge is the run's exported model: what the two differ by must be
    small against what the run changed (a wrong lora_alpha scales the whole update, a ratio of |1 - wrong/right|)."""
    import torch

    names = [name for name in exported if name in merged and name in base]
    changed = torch.sqrt(sum((exported[n].float() - base[n].float()).pow(2).sum() for n in names))
    differs = torch.sqrt(sum((merged[n].float() - exported[n].float()).pow(2).sum() for n in names))
    if changed == 0 or differs / changed > 0.1:
        raise SystemExit(
            f"step {step} merged with --lora-alpha {lora_alpha:g} is not the run's hf_model (they differ by "
            f"{float(differs / max(changed, 1e-12)):.0%} of what the run changed): pass the run's "
            "actor_rollout_ref.model.lora_alpha"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--steps", required=True, help="the checkpoints to average: A-B (inclusive) or N")
    parser.add_argument("--lora-alpha", type=float, required=True, help="the run's actor_rollout_ref.model.lora_alpha")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--base", type=Path, help="the base model folder (default: the path the checkpoint names)")
    args = parser.parse_args(argv)

    import torch
    from safetensors.torch import load_file, save_file

    from app.trainer.checkpoints import list_checkpoints

    lo, hi = parse_steps(args.steps)
    found = dict(list_checkpoints(args.run_dir))
    chosen = [step for step in sorted(found) if lo <= step <= hi]
    absent = [step for step in range(lo, hi + 1) if step not in found]
    if absent:
        raise SystemExit(f"{args.run_dir}: no checkpoint of step {absent[0]} (has {sorted(found) or 'none'})")
    newest = max(found)
    base_dir = args.base
    if base_dir is None:
        extra = torch.load(found[newest] / "actor" / "engine_state.pt", weights_only=True)
        base_dir = Path(extra["model_path"])
    base = load_file(str(base_dir / "model.safetensors"))

    per_step = {step: adapter_updates(found[step] / "actor", args.lora_alpha) for step in chosen}
    exported_dir = args.run_dir / "hf_model"
    if (exported_dir / "model.safetensors").is_file():
        # the newest step is usually among those averaged: its checkpoint is read once
        newest_updates = per_step.get(newest) or adapter_updates(found[newest] / "actor", args.lora_alpha)
        exported = load_file(str(exported_dir / "model.safetensors"))
        check_reproduces(apply_updates(base, newest_updates), exported, base, newest, args.lora_alpha)

    merged = apply_updates(base, average_updates(list(per_step.values())))
    args.output.mkdir(parents=True, exist_ok=True)
    for item in base_dir.iterdir():
        if item.is_file() and item.name != "model.safetensors":
            shutil.copyfile(item, args.output / item.name)
    save_file(merged, str(args.output / "model.safetensors"), metadata={"format": "pt"})
    print(f"{args.output}: the mean update of steps {chosen[0]}-{chosen[-1]} ({len(chosen)} checkpoints) on {base_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
