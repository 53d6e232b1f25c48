"""`actor_rollout_ref.rollout.engine_kwargs.vllm` names arguments of the installed vLLM's EngineArgs: a misspelt one
would otherwise fail each replica as it starts, after Ray. Imports vLLM (seconds), so only when the key is given."""

from __future__ import annotations

import dataclasses
import difflib

from app.config.engine_kwargs_check import KEY
from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError
from serve.log_config import hold_vllm_import_notices


def check_vllm_engine_kwargs_names(cfg: TrainerRunConfig) -> None:
    kwargs = cfg.actor_rollout_ref.rollout.engine_kwargs.vllm
    if not kwargs:
        return
    hold_vllm_import_notices()  # its import-time notices (Triton on a CPU) are not about the run
    try:
        import vllm
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:  # a driver without vLLM (a cluster's head node): the replicas' vLLM names it
        return
    known = {f.name for f in dataclasses.fields(EngineArgs)}
    for name in kwargs:
        if name not in known:
            near = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f"; did you mean {near[0]}?" if near else ""
            raise PreflightError(f"{KEY}.{name}: vLLM {vllm.__version__}'s EngineArgs has no argument {name}{hint}")
