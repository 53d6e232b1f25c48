"""A resumable checkpoint folder as the trainer writes it (global_step_<N>/ with trainer_state.json and an FSDP DCP
actor/ folder), for a model's full weights, written in this process without a process group."""

from __future__ import annotations

import json
from pathlib import Path


def write_checkpoint(model_dir: Path, root: Path, step: int = 1) -> Path:
    import torch
    import torch.distributed.checkpoint as dcp
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ckpt = root / f"global_step_{step}"
    actor = ckpt / "actor"
    actor.mkdir(parents=True)
    dcp.save({"model": model.state_dict()}, checkpoint_id=str(actor))
    torch.save({"step": step}, actor / "engine_state.pt")
    (ckpt / "trainer_state.json").write_text(
        json.dumps({"global_step": step, "policy_version": step, "kl_coef": 0.0, "data": {}, "world_size": 1})
    )
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return ckpt
