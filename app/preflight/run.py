"""The pre-flight checks, in the order they run, and running them: after the config is validated, before Ray starts.

To add one: a function `check_x(cfg: TrainerRunConfig)` that raises PreflightError with one line naming the key and
what to change, in its own module here, and a `Check` row below (apart=True when it imports heavy or user code, which
then stays out of the driver). What a check returns (other than None) is handed back by name: the data check's
prompt counts.
"""

from __future__ import annotations

import itertools
import multiprocessing
import sys
from dataclasses import dataclass
from typing import Any, Callable, Collection, Optional

from app.config.schema import TrainerRunConfig
from app.preflight.checkpoint_copy import check_checkpoint_copy
from app.preflight.checkpoint_model import check_checkpoint_model
from app.preflight.cluster_address import check_cluster_answers
from app.preflight.context_length import check_context_length
from app.preflight.data_files import check_data_files
from app.preflight.data_rows import check_data_rows
from app.preflight.extension_lock import check_extension_locks
from app.preflight.http_port import check_http_port
from app.preflight.lora_targets import check_lora_targets
from app.preflight.model_config import check_model_configs
from app.preflight.model_libs import check_model_libs
from app.preflight.model_overrides import check_model_overrides
from app.preflight.model_path import check_model_paths
from app.preflight.ray_init import check_ray_init
from app.preflight.reward_file import check_reward_function
from app.preflight.tokenizer import check_tokenizer
from app.preflight.vllm_engine_kwargs import check_vllm_engine_kwargs_names


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[TrainerRunConfig], Any]
    apart: bool = False  # run in a child process: it imports transformers, torch or the user's reward file


CHECKS: list[Check] = [
    Check("cluster_address", check_cluster_answers),
    Check("ray_init", check_ray_init),
    Check("model_path", check_model_paths),
    Check("context_length", check_context_length),
    Check("http_port", check_http_port),
    Check("extension_lock", check_extension_locks),
    Check("checkpoint_copy", check_checkpoint_copy),
    Check("data_files", check_data_files),  # columns and paths in a second; the full read is the "data" check
    # first in the child: the checks after it that read a model's config see what these modules register
    Check("model_libs", check_model_libs, apart=True),
    Check("model_config", check_model_configs, apart=True),
    Check("reward_function", check_reward_function, apart=True),
    # before the tokenizer and the full data read (seconds for a large file): a wrong checkpoint fails sooner
    Check("checkpoint_model", check_checkpoint_model, apart=True),
    Check("model_overrides", check_model_overrides, apart=True),
    Check("lora_targets", check_lora_targets, apart=True),  # builds the model on meta, with the overrides checked
    Check("vllm_engine_kwargs", check_vllm_engine_kwargs_names, apart=True),  # imports vLLM where the key is given
    Check("tokenizer", check_tokenizer, apart=True),
    Check("data", check_data_rows, apart=True),  # the same child: transformers and the tokenizer are loaded there
]


def run_preflight(
    cfg: TrainerRunConfig, skip: Collection[str] = (), start_method: Optional[str] = None
) -> dict[str, Any]:
    """Every check but those named in `skip`, in order; the first failure raises its error (a PreflightError, or the
    DataError / CheckpointError of the data and checkpoint checks). Consecutive `apart` ones run together in one child
    process (fork on Linux, as PyTorch's DataLoader does; spawn elsewhere). Returns what the checks returned, by
    name."""
    unknown = set(skip) - {c.name for c in CHECKS}
    if unknown:
        raise ValueError(f"run_preflight: no checks named {sorted(unknown)}")
    chosen = [c for c in CHECKS if c.name not in skip]
    results: dict[str, Any] = {}
    for apart, group in itertools.groupby(chosen, key=lambda c: c.apart):
        names = [c.name for c in group]
        if not apart:
            results.update(_run_named(cfg, names))
            continue
        if start_method is None:
            start_method = "fork" if sys.platform == "linux" else "spawn"
        with multiprocessing.get_context(start_method).Pool(1) as pool:
            results.update(pool.apply(_run_named, (cfg, names)))
    return results


def _run_named(cfg: TrainerRunConfig, names: list[str]) -> dict[str, Any]:
    by_name = {c.name: c for c in CHECKS}  # in a child, its CHECKS: the parent's under fork
    results = {}
    for name in names:
        value = by_name[name].run(cfg)
        if value is not None:
            results[name] = value
    return results
