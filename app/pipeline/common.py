"""What both cards share: the model-import keys, the infrastructure keys, and the GPU layout they map to."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from app.config.schema import CPU_NUM_WORKERS
from app.pipeline.params import Param, PipelineError, Values
from app.pipeline.plan import Plan

MODEL_KEYS = ("huggingface_id", "pytorch_model_path", "mlflow_model_path")


def model_params() -> tuple[Param, ...]:
    section = "Model import"
    return (
        Param(
            "huggingface_id",
            None,
            "str",
            section,
            optional=True,
            mapping="a hub id resolved from the local Hugging Face cache (no download) -> "
            "`actor_rollout_ref.model.path`; exactly one of the three model keys",
        ),
        Param(
            "pytorch_model_path",
            None,
            "path",
            section,
            optional=True,
            mapping="a local Hugging Face folder -> `actor_rollout_ref.model.path`",
        ),
        Param(
            "mlflow_model_path",
            None,
            "path",
            section,
            optional=True,
            mapping="an MLflow transformers model, imported by `app.import_model` into the run folder -> "
            "`actor_rollout_ref.model.path`",
        ),
    )


def infra_params(gpu_default: Optional[int]) -> tuple[Param, ...]:
    section = "Infrastructure"
    azure = "a managed-compute setting; here the Ray cluster (local, `RAY_ADDRESS` or `trainer.ray_address`) decides"
    return (
        Param("instance_type_*", None, "str", section, na=azure),
        Param("compute_*", None, "str", section, na=azure),
        Param(
            "shm_size_finetune",
            None,
            "str",
            section,
            optional=True,
            na="shared memory is the container's or Ray's (object store) setting, not the job's",
        ),
        Param(
            "num_nodes_finetune",
            1,
            "int",
            section,
            mapping="`trainer.nnodes` on GPUs (on CPU the rank count is `trainer.num_workers`)",
        ),
        Param(
            "number_of_gpu_to_use_finetuning",
            gpu_default,
            "int",
            section,
            optional=True,
            mapping="`trainer.n_gpus_per_node`; left unset: the GPUs visible here (0 on a CPU machine: CPU "
            "training with `trainer.num_workers` ranks)",
        ),
    )


def visible_gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # no CUDA build: a CPU machine
        return 0


def map_gpu_layout(
    values: Values, plan: Plan, gpu_keys: tuple[str, ...], node_keys: tuple[str, ...], tp_keys: tuple[str, ...] = ()
) -> int:
    """`trainer.n_gpus_per_node` / `trainer.nnodes` / rollout tensor parallelism from the GPU keys. A value the user
    gave is taken as it is (the schema then checks it); a card default is capped at the GPUs visible on this machine,
    so the card's own defaults run on a CPU box too. Returns the training rank count."""
    visible = visible_gpus()
    gpus = _agreed(values, gpu_keys)
    if gpus is None:
        default = next((values[k] for k in gpu_keys if values[k] is not None), None)
        gpus = visible if default is None else min(default, visible)
        plan.notes.append(
            f"GPUs per node: {gpus} ({' / '.join(gpu_keys)} not given; card default "
            f"{default if default is not None else 'all'}, {visible} visible here)"
        )
    nodes = _agreed(values, node_keys) or 1
    if gpus == 0:
        plan.overrides["trainer.n_gpus_per_node"] = 0
        if nodes != 1:
            plan.notes.append(
                f"{' / '.join(node_keys)}={nodes} not applied: CPU training runs trainer.num_workers "
                "ranks on the Ray cluster"
            )
        ranks = plan.overrides.get("trainer.num_workers") or CPU_NUM_WORKERS
    else:
        plan.overrides["trainer.n_gpus_per_node"] = gpus
        plan.overrides["trainer.nnodes"] = nodes
        ranks = gpus * nodes
    for key in tp_keys:
        tp = values[key]
        if key not in values.given and tp > max(gpus, 1):
            plan.notes.append(f"{key}: card default {tp} capped to {max(gpus, 1)} (GPUs per node)")
            tp = max(gpus, 1)
        plan.overrides["actor_rollout_ref.rollout.tensor_model_parallel_size"] = tp
    return ranks


def _agreed(values: Values, keys: tuple[str, ...]) -> Optional[int]:
    """The one value the user gave under any of `keys` (they name the same thing); an error when they disagree."""
    given = {k: values[k] for k in keys if k in values.given}
    if len(set(given.values())) > 1:
        raise PipelineError(
            f"{' and '.join(f'{k}={v}' for k, v in given.items())} name the same setting with "
            "different values; give one"
        )
    return next(iter(given.values()), None)


def model_source(values: Values) -> tuple[str, str]:
    """(key, value) of the one model-import key given."""
    given = [(k, values[k]) for k in MODEL_KEYS if values[k]]
    if len(given) != 1:
        named = ", ".join(k for k, _ in given) or "none"
        raise PipelineError(f"give exactly one of {', '.join(MODEL_KEYS)} (given: {named})")
    return given[0]


def resolve_model(key: str, value: str, work_dir: Path, dry_run: bool) -> str:
    """The local Hugging Face folder to train from. A folder is used in place; a hub id must be in the local cache;
    an MLflow model is imported into `work_dir/base_model` (in a dry run only checked)."""
    from app.import_model import ModelImportError, _classify, import_model

    if key == "pytorch_model_path":
        path = Path(value).expanduser()
        if not (path / "config.json").is_file():
            raise PipelineError(f"pytorch_model_path={value}: not a Hugging Face model folder (no config.json)")
        return str(path.resolve())
    try:
        if key == "huggingface_id":
            kind, path = _classify(value)
            if kind not in ("hub", "hf"):
                raise PipelineError(
                    f"huggingface_id={value!r} is a {kind} source; use "
                    f"{'mlflow_model_path' if kind == 'mlflow' else 'pytorch_model_path'}"
                )
            return str(path)
        if not (Path(value).expanduser() / "MLmodel").is_file():
            raise PipelineError(f"mlflow_model_path={value}: not an MLflow model folder (no MLmodel file)")
        target = work_dir / "base_model"
        if dry_run:
            return str(target.resolve())
        return str(import_model(value, target, dtype="float32").resolve())
    except ModelImportError as exc:
        raise PipelineError(f"{key}: {exc}") from exc


def check_output_folder(key: str, folder: Path) -> None:
    """Before the run: the folder an output goes to is absent, empty, or an earlier output of the same kind (a
    Hugging Face folder or an MLflow model), which the new one replaces; anything else is left alone."""
    if folder.is_file() or (folder.is_dir() and any(folder.iterdir()) and not _is_model_folder(folder)):
        raise PipelineError(
            f"{key}={folder}: exists and holds something other than a model; choose an empty or new folder"
        )


def _is_model_folder(folder: Path) -> bool:
    return (folder / "config.json").is_file() or (folder / "MLmodel").is_file()


def move_folder(src: Path, dst: Path) -> None:
    """Put `src` at `dst` (absent, empty, or an earlier model, replaced), a rename when both lie on one file system."""
    import shutil

    if dst.exists():
        check_output_folder(str(dst), dst)
        shutil.rmtree(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(os.fspath(src), os.fspath(dst))


def apply_table(table: tuple[Param, ...], values: Values, plan: Plan) -> None:
    """The rows that copy a value onto a trainer key, and the not-applicable rows with their values and reasons.
    Rows with a `mapping` are the card module's own work."""
    for param in table:
        if param.is_prefix:
            continue
        value = values[param.name]
        if param.target is not None and value is not None:
            plan.overrides[param.target] = value
        elif param.na is not None:
            plan.not_applicable.append((param.name, value, param.na))
    for key, value in values.extra_keys.items():
        param = next(p for p in table if p.is_prefix and p.matches(key))
        plan.not_applicable.append((key, value, param.na))


def apply_trainer_overrides(values: Values, plan: Plan) -> None:
    """Dotted `section.key=value` parameters: trainer-config keys set last, as `python -m app.train` takes them (the
    schema checks the key and the value). YAML-typed, as on the command line: 1e-3 is a number, [a,b] a list."""
    for key, value in values.trainer_overrides.items():
        plan.overrides[key] = _typed(value) if isinstance(value, str) else value


def _typed(text: str):
    import yaml

    for number in (int, float):  # YAML 1.1 reads 1e-3 as text
        try:
            return number(text)
        except ValueError:
            pass
    try:
        return yaml.safe_load(text) if text.strip() else text
    except yaml.YAMLError:
        return text
