"""grpo_chat_completion's `mlflow_model_folder`: the model of the best validation, as an MLflow transformers model.

"Best" is the highest `val-core/reward/mean` (greedy validation reward) in the run's metrics.jsonl, ties going to the
later step, among the validations whose weights we still have: step 0 (the base model, when the run validated before
training), the last step (the exported `hf_model`), and any step with a kept checkpoint (`global_step_N`: save_steps a
multiple of eval_steps, not pruned by save_total_limit), which is turned into a Hugging Face folder by a short resume
run that trains nothing. When the best validation has no weights left, the best of those that do is taken and the run
says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

REWARD = "val-core/reward/mean"


def choose_best(history: list[tuple[int, float]], available: set[int]) -> tuple[Optional[int], Optional[int]]:
    """(best step overall, best step among `available`) of (step, reward) pairs; ties go to the later step."""

    def best(rows):
        return max(rows, key=lambda r: (r[1], r[0]))[0] if rows else None

    return best(history), best([r for r in history if r[0] in available])


def save_best_model(run_cfg: Any, cfg: Any, out: Path) -> Path:
    from app.pipeline.common import move_folder
    from app.trainer.checkpoints import list_checkpoints
    from app.trainer.launch import validation_history

    run_dir = Path(run_cfg.trainer.default_local_dir).resolve()
    history = [(step, m[REWARD]) for step, m in validation_history(run_dir)]
    last = history[-1][0] if history else None
    checkpoints = {step: path for step, path in list_checkpoints(run_dir)}
    available = set(checkpoints) | {0} | ({last} if last is not None else set())
    best, chosen = choose_best(history, available)
    if chosen is None or chosen == last:
        source, chosen = run_dir / "hf_model", chosen if chosen is not None else last
    elif chosen == 0:
        source = Path(run_cfg.actor_rollout_ref.model.path)
    else:
        source = _export_checkpoint(cfg, checkpoints[chosen], chosen, run_dir / f"best_step_{chosen}")
    if best != chosen:
        print(
            f"best validation reward was at step {best}, whose weights were not kept (no checkpoint there); "
            f"saving the best of the kept ones, step {chosen}"
        )
    reward = dict(history).get(chosen)
    staging = out.with_name(f".{out.name}.tmp")
    metadata = {"rayrl_step": chosen, "rayrl_val_reward": reward, "rayrl_run_dir": str(run_dir)}
    _save_mlflow(source, staging, metadata, run_cfg.actor_rollout_ref.model)
    move_folder(staging, out)
    (out / "best.json").write_text(json.dumps({"step": chosen, REWARD: reward, "source": str(source)}, indent=1))
    print(f"mlflow_model_folder: {out.resolve()} (step {chosen}, validation reward {reward})")
    return out


def _export_checkpoint(cfg: Any, ckpt: Path, step: int, work: Path) -> Path:
    """A Hugging Face folder of checkpoint `ckpt`: the trainer resumes from it with nothing left to train, so it only
    exports (the same code path as the end of every run)."""
    import copy

    from omegaconf import OmegaConf

    from app.train import run

    export_cfg = copy.deepcopy(cfg)
    for key, value in (
        ("trainer.resume_mode", str(ckpt)),
        ("trainer.total_training_steps", step),
        ("trainer.val_before_train", False),
        ("trainer.default_local_dir", str(work)),
        ("trainer.logger", ["jsonl"]),
        ("trainer.log_val_generations", 0),
    ):
        OmegaConf.update(export_cfg, key, value, merge=False)
    if run(export_cfg):
        raise RuntimeError(f"exporting checkpoint {ckpt} failed")
    return work / "hf_model"


def _save_mlflow(source: Path, out: Path, metadata: dict[str, Any], policy: Any) -> None:
    """Save the Hugging Face folder `source` as an MLflow transformers model; `policy` (the run's
    actor_rollout_ref.model) names the modules that register a model type of one's own and whether the folder's own
    code may run, as the trainer loaded it."""
    import shutil

    import mlflow.transformers
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from serve.model_libs import KEY, import_model_libs, lib_names

    import_model_libs(lib_names(policy.external_lib), KEY)
    shutil.rmtree(out, ignore_errors=True)
    remote = policy.trust_remote_code
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, trust_remote_code=remote)
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=remote)
    import transformers

    # named, not inferred: MLflow's inference imports every optional package transformers might use (torchvision ...)
    requirements = [f"transformers=={transformers.__version__}", f"torch=={torch.__version__.split('+')[0]}"]
    mlflow.transformers.save_model(
        transformers_model={"model": model, "tokenizer": tokenizer},
        path=str(out),
        task="text-generation",
        metadata=metadata,
        pip_requirements=requirements,
    )
