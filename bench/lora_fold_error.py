"""What folding a LoRA run's adapter into bf16 weights changes: the policy vLLM serves under `rollout.lora_sync: merged`
against the one the trainer computes.

Under `merged`, each sync adds the adapter's update `lora_alpha / rank * B @ A` to the base weights in float32 and
casts the sum back to the weights' dtype (`serve.lora_fold`). In bf16 an element moves only by whole steps of its
own precision (1/256 to 1/128 of its size), so an update smaller than half a step is lost and a larger one is
rounded; the trainer instead adds the adapter's output to the base layer's. For the newest checkpoint of each RUN_DIR
this prints the share of the adapted weights' elements the fold changes, how far the folded update is from the
adapter's (relative Frobenius error), and the greedy validation of both policies on the arithmetic task: the folded
one (the run's `hf_model`, what validation graded) and the trainer's (base weights, plus the adapter's update applied
to each layer's input in float32), with how many answers differ.

    python bench/lora_fold_error.py RUN_DIR [RUN_DIR ...] --lora-alpha 32 [--data data/arithmetic/test.parquet]
        [--max-samples 128] [--max-tokens 48] [--base MODEL_DIR]

RUN_DIR is a LoRA run's `trainer.default_local_dir` (the quickstart's `lora_alpha` is 32, from grpo_trainer.yaml);
where it holds the run's `hf_model`, the fold must reproduce it. The fold and the greedy generation (transformers) are
in the base model file's dtype, bf16 for the quickstart's model: what a run on a bf16 machine syncs. A run in float32
(a CPU without native bf16) folds in float32 and keeps its updates.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from arithmetic_levels import greedy_continuations, level_table, load_problems  # noqa: E402
from checkpoint_average import adapter_updates, apply_updates, check_reproduces  # noqa: E402


def fold_error(
    base: dict[str, torch.Tensor], folded: dict[str, torch.Tensor], updates: dict[str, torch.Tensor]
) -> tuple[float, float]:
    """``(share of elements the fold changes, |folded update - update| / |update|)`` over every adapted weight, where
    the folded update is ``folded - base`` in float32 (`folded`: `apply_updates(base, updates)`)."""
    changed = elements = 0
    error_sq = update_sq = 0.0
    for name, update in updates.items():
        kept = folded[name].float() - base[name].float()
        changed += int((kept != 0).sum())
        elements += kept.numel()
        error_sq += float((kept - update).pow(2).sum())
        update_sq += float(update.pow(2).sum())
    return changed / max(elements, 1), (error_sq / update_sq) ** 0.5 if update_sq else 0.0


def set_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Copy each named tensor into the model's own (tied weights the file leaves out stay as they are)."""
    import torch

    own = model.state_dict()
    for name, tensor in weights.items():
        if name not in own:
            raise SystemExit(f"the model has no weight {name}; is --base the run's model?")
        with torch.no_grad():
            own[name].copy_(tensor)


def add_unfolded_updates(model: torch.nn.Module, updates: dict[str, torch.Tensor]) -> list:
    """Forward hooks that add ``input @ update.T`` (float32, cast to the output's dtype) to each adapted linear layer's
    output: the trainer's LoRA policy without the fold. Returns the hook handles; SystemExit names a weight the model
    lacks."""
    modules = dict(model.named_modules())
    handles = []
    for name, update in updates.items():
        module = modules.get(name.removesuffix(".weight"))
        if module is None:
            raise SystemExit(f"the model has no layer for the adapted weight {name}; is --base the run's model?")

        def add(module, inputs, output, update=update):
            return output + (inputs[0].float() @ update.T).to(output.dtype)

        handles.append(module.register_forward_hook(add))
    return handles


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--lora-alpha", type=float, required=True, help="the runs' actor_rollout_ref.model.lora_alpha")
    parser.add_argument("--data", type=Path, default=REPO / "data/arithmetic/test.parquet")
    parser.add_argument("--max-samples", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--base", type=Path, help="the base model folder (default: the path the checkpoint names)")
    args = parser.parse_args(argv)

    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from app.data.prompts import render_prompts
    from app.trainer.checkpoints import list_checkpoints

    problems = load_problems(args.data, args.max_samples)
    for run_dir in args.run_dirs:
        found = dict(list_checkpoints(run_dir))
        if not found:
            raise SystemExit(f"{run_dir}: no checkpoint (global_step_<N>/actor)")
        step = max(found)
        base_dir = args.base
        if base_dir is None:
            base_dir = Path(torch.load(found[step] / "actor" / "engine_state.pt", weights_only=True)["model_path"])
        base = load_file(str(base_dir / "model.safetensors"))
        updates = adapter_updates(found[step] / "actor", args.lora_alpha)
        folded_weights = apply_updates(base, updates)
        exported = run_dir / "hf_model" / "model.safetensors"
        if exported.is_file():  # a wrong --lora-alpha would scale every update: the run's export says so
            check_reproduces(folded_weights, load_file(str(exported)), base, step, args.lora_alpha)
        changed, error = fold_error(base, folded_weights, updates)
        dtype = next(iter(base.values())).dtype
        print(
            f"\n{run_dir}, step {step}: the fold to {str(dtype).removeprefix('torch.')} changes {changed:.1%} of the "
            f"adapted weights' elements; the folded update differs from the adapter's by {error:.0%}"
        )

        tokenizer = AutoTokenizer.from_pretrained(base_dir)
        texts = render_prompts(tokenizer, [p.messages for p in problems])
        model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=dtype).eval()
        set_weights(model, folded_weights)
        folded = greedy_continuations(tokenizer, model, texts, args.max_tokens)
        set_weights(model, base)
        handles = add_unfolded_updates(model, updates)
        unfolded = greedy_continuations(tokenizer, model, texts, args.max_tokens)
        for handle in handles:
            handle.remove()
        for name, answers in (
            ("folded (as served under lora_sync: merged)", folded),
            ("unfolded (the trainer's)", unfolded),
        ):
            print(f"\n{name}:\n{level_table(problems, answers)}")
        differ = sum(a != b for a, b in zip(folded, unfolded))
        print(f"\ngreedy answers that differ: {differ} of {len(problems)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
