"""`*.model.target_modules` names modules of the model LoRA wraps. peft skips a listed name that matches no module
without a word (the adapter goes on the others: a misspelt `v_porj` leaves every value projection untrained), and
refuses a list or regex that matches none in the train workers, after Ray, Serve and vLLM started. An
`exclude_modules` regex that matches nothing is left alone: verl's recipes exclude `.*visual.*` on text models too.
The model is built on the meta device (no weights read), in the child, after the external_lib modules are imported
and the override_config names checked."""

from __future__ import annotations

import difflib
import re
from typing import Any, Iterator, Optional, Union

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError
from app.preflight.model_sections import built_model_sections

ALL_LINEAR = "all-linear"  # peft's name for every linear layer but the output head


def check_lora_targets(cfg: TrainerRunConfig) -> None:
    import torch

    from app.engine.hf_model import apply_lora, build_empty_model

    for section, spec in _lora_specs(cfg):
        model = build_empty_model(spec, torch.float32, "sdpa")
        names = [name for name, _ in model.named_modules() if name]
        _check_names(f"{section}.target_modules", spec.target_modules, names, model)
        try:
            apply_lora(model, spec)
        except ValueError as err:  # peft's NoMatchingPeftModuleError is one; so is an adapter that trains nothing
            raise PreflightError(f"{section}.target_modules={spec.target_modules!r}: {err}") from None


def _lora_specs(cfg: TrainerRunConfig) -> Iterator[tuple[str, Any]]:
    """(section, engine spec) of each model the run trains with LoRA adapters, as the train workers build it."""
    from app.roles.factory import actor_engine_spec, critic_engine_spec

    arr = cfg.actor_rollout_ref
    specs = {
        "actor_rollout_ref.model": lambda: actor_engine_spec(arr.model, arr.actor, seed=0, rollout_n=arr.rollout.n),
        "critic.model": lambda: critic_engine_spec(cfg.critic, seed=0, rollout_n=arr.rollout.n),
    }
    for section, model in built_model_sections(cfg):
        if getattr(model, "lora_rank", 0) > 0:  # the reward model's section has no adapters
            yield section, specs[section]()


def _check_names(key: str, value: Optional[Union[str, list[str]]], names: list[str], model: Any) -> None:
    """A list names modules as peft matches them (the whole name or its last dotted parts); a string other than
    all-linear is a regex over whole module names."""
    if not value or value == ALL_LINEAR:
        return
    if isinstance(value, str):
        if not any(re.fullmatch(value, name) for name in names):
            raise PreflightError(
                f"{key}={value!r}: the regex matches no module name of {type(model).__name__} (a whole name, e.g. "
                f"{max(names, key=lambda n: n.count('.'))}); its linear layers end in "
                f"{', '.join(_linear_leaves(model))}"
            )
        return
    for target in value:
        if not any(name == target or name.endswith("." + target) for name in names):
            leaves = _linear_leaves(model)
            near = difflib.get_close_matches(target, leaves, n=1)
            hint = f"did you mean {near[0]}? " if near else ""
            raise PreflightError(
                f"{key}: {target!r} names no module of {type(model).__name__}, so peft would skip it without a word; "
                f"{hint}its linear layers end in {', '.join(leaves)}"
            )


def _linear_leaves(model: Any) -> list[str]:
    import torch

    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
