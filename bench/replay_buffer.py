"""What a run's self-imitation replay buffer holds at a checkpoint: how many answers, to how many different prompts.

A group that answers an easy prompt right eight times adds eight answers at once, so the buffer
(`actor_rollout_ref.actor.self_imitation.buffer_size`, the latest answers) can hold few problems many times over.
For each checkpoint folder (`RUN_DIR/global_step_N`, or a run folder: its latest checkpoint) this prints, per rank,
the answers kept, the distinct prompts among them, and how many answers each prompt has, most first; `--show` adds
each answer with the end of its prompt.

    python bench/replay_buffer.py RUN_DIR_OR_CHECKPOINT [...] [--tokenizer models/smollm2-135m-instruct] [--show]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def checkpoint_dir(path: Path) -> Path:
    """`path` if it is a checkpoint (holds a replay file), else the run folder's latest complete `global_step_N`."""
    from app.trainer.checkpoints import list_checkpoints

    if any(path.glob("self_imitation_rank*.pt")):
        return path
    checkpoints = list_checkpoints(path)
    if not checkpoints:
        raise SystemExit(f"{path}: neither a checkpoint with a replay buffer nor a run folder with global_step_N")
    latest = checkpoints[-1][1]
    if not any(latest.glob("self_imitation_rank*.pt")):
        raise SystemExit(f"{latest}: no self_imitation_rank*.pt (was actor.self_imitation.coef 0?)")
    return latest


def prompt_counts(state: dict) -> list[int]:
    """Answers per distinct prompt, most first, of one rank's saved buffer (`ReplayBuffer.state_dict()`)."""
    prompts = [tuple(ids[: len(ids) - len(resp)].tolist()) for ids, resp in zip(state["input_ids"], state["responses"])]
    return sorted(Counter(prompts).values(), reverse=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--tokenizer", type=Path, default=REPO / "models" / "smollm2-135m-instruct")
    parser.add_argument("--show", action="store_true", help="print each answer's prompt and start")
    args = parser.parse_args(argv)
    import torch

    tokenizer = None
    if args.show:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    for path in args.paths:
        ckpt = checkpoint_dir(path)
        for file in sorted(ckpt.glob("self_imitation_rank*.pt")):
            state = torch.load(file, weights_only=True)
            counts = prompt_counts(state)
            print(f"{file}: {sum(counts)} answers, {len(counts)} prompts, answers per prompt {counts}")
            if tokenizer is not None:
                for ids, resp in zip(state["input_ids"], state["responses"]):
                    prompt = " ".join(tokenizer.decode(ids[: len(ids) - len(resp)], skip_special_tokens=True).split())
                    answer = tokenizer.decode(resp, skip_special_tokens=True)
                    print(f"  ...{prompt[-90:]!r} -> {answer[:70]!r}")


if __name__ == "__main__":
    sys.exit(main())
