"""A checkpoint to resume from was written for the model being trained: the tensor shapes in its actor/ folder
(FSDP's DCP index) match that model's, and a LoRA checkpoint has the configured rank. Otherwise the workers would
fail while loading, after Ray, Serve and vLLM started, with a size mismatch deep in torch.distributed.checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError

_LORA_PREFIX = "base_model.model."


def check_checkpoint_model(cfg: TrainerRunConfig) -> None:
    from app.trainer.checkpoints import check_checkpoint, find_resume_dir

    resume = find_resume_dir(Path(cfg.trainer.default_local_dir), cfg.trainer.resume_mode)
    if resume is not None:
        check_checkpoint(resume)  # complete and readable first: the index below is read from it
    if resume is None or not (resume / "actor" / ".metadata").is_file():  # none, or DeepSpeed's own format
        return
    saved = checkpoint_shapes(resume / "actor")
    model = cfg.actor_rollout_ref.model
    expected = model_shapes(model.path, model.trust_remote_code)
    problem = first_mismatch(saved, expected, model.lora_rank)
    if problem:
        key = (
            "trainer.resume_mode"
            if cfg.trainer.resume_mode not in ("auto", "disable")
            else "trainer.default_local_dir (resume_mode=auto)"
        )
        raise PreflightError(
            f"{key}: the checkpoint {resume} was not written for actor_rollout_ref.model.path="
            f"{model.path} (lora_rank={model.lora_rank}): {problem}; resume from a checkpoint of this "
            "model, or start afresh with trainer.resume_mode=disable or another "
            "trainer.default_local_dir"
        )


def checkpoint_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """The model tensors a DCP checkpoint holds, by name (without the `model.` of the saved state's top level)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = FileSystemReader(str(folder)).read_metadata()
    return {
        name[len("model.") :]: tuple(entry.size)
        for name, entry in metadata.state_dict_metadata.items()
        if name.startswith("model.") and isinstance(entry, TensorStorageMetadata)
    }


def model_shapes(path: str, trust_remote_code: bool) -> dict[str, tuple[int, ...]]:
    """The parameter shapes of the model at `path`, built on the meta device (no weights read)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def first_mismatch(
    saved: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]], lora_rank: int
) -> Optional[str]:
    """What differs, as a phrase naming the tensor and both shapes; None when every saved tensor fits the model."""
    for name, shape in sorted(saved.items()):
        if ".lora_A." in name or ".lora_B." in name:
            problem = _lora_mismatch(name, shape, expected, lora_rank)
        else:
            base = name[len(_LORA_PREFIX) :] if name.startswith(_LORA_PREFIX) else name
            if base.endswith(".base_layer.weight"):
                base = base.replace(".base_layer.weight", ".weight")
            if base not in expected:
                problem = f"it holds {name}, which this model has no tensor for"
            elif expected[base] != shape:
                problem = f"its {name} is {list(shape)}, this model's is {list(expected[base])}"
            else:
                problem = None
        if problem:
            return problem
    return None


def _lora_mismatch(name: str, shape: tuple[int, ...], expected: dict, lora_rank: int) -> Optional[str]:
    if not lora_rank:
        return f"it holds the LoRA adapter tensor {name}, and actor_rollout_ref.model.lora_rank=0 trains no adapter"
    is_a = ".lora_A." in name
    module = name.split(".lora_A." if is_a else ".lora_B.")[0]
    module = module[len(_LORA_PREFIX) :] if module.startswith(_LORA_PREFIX) else module
    weight = expected.get(module + ".weight")
    if weight is None or len(weight) != 2 or len(shape) != 2:
        return f"it holds the adapter {name}, for a layer this model does not have"
    rank, width = (shape[0], shape[1]) if is_a else (shape[1], shape[0])
    model_width = weight[1] if is_a else weight[0]
    if rank != lora_rank:
        return f"its adapter {name} has rank {rank}, actor_rollout_ref.model.lora_rank={lora_rank}"
    if width != model_width:
        return f"its adapter {name} is {list(shape)}, which this model's {module} ({list(weight)}) does not take"
    return None
