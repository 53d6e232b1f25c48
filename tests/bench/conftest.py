"""Fixtures shared by the bench tests."""

import json
from pathlib import Path

import pytest

LORA_RANK, LORA_ALPHA = 2, 4  # scaling alpha / rank = 2


@pytest.fixture
def write_lora_run(tiny_model_dir):
    """``write_lora_run(root, steps)`` writes a LoRA run folder of the tiny model as `trainer.save_freq=1` leaves it:
    per step a DCP actor folder holding the adapter alone (as the FSDP engine saves a LoRA model), and the newest step
    merged into `hf_model`. At step k each q_proj's lora_A and lora_B are k at [0, 0], so its merged update is
    ``2 * k * k`` at [0, 0] and 0 elsewhere. ``write_lora_run.lora_alpha`` is the alpha to pass back."""

    def write(root: Path, steps: int) -> None:
        import torch
        import torch.distributed.checkpoint as dcp
        from peft import LoraConfig, get_peft_model
        from safetensors.torch import load_file, save_file
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        peft_model = get_peft_model(model, LoraConfig(r=LORA_RANK, lora_alpha=LORA_ALPHA, target_modules=["q_proj"]))
        for step in range(1, steps + 1):
            adapter = {}
            for name, param in peft_model.named_parameters():
                if param.requires_grad:
                    value = torch.zeros_like(param)
                    value[0, 0] = step
                    adapter[name] = value
            actor = root / f"global_step_{step}" / "actor"
            actor.mkdir(parents=True)
            dcp.save({"model": adapter}, checkpoint_id=str(actor))
            torch.save({"model_path": str(tiny_model_dir), "world_size": 1}, actor / "engine_state.pt")
            (actor.parent / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        base = load_file(str(tiny_model_dir / "model.safetensors"))
        exported = dict(base)
        for name in base:
            if name.endswith("q_proj.weight"):
                exported[name] = base[name].clone()
                exported[name][0, 0] += 2.0 * steps * steps
        (root / "hf_model").mkdir()
        save_file(exported, str(root / "hf_model" / "model.safetensors"))

    write.lora_alpha = LORA_ALPHA
    return write
