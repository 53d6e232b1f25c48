"""A card's parameters turned into a plan: trainer-config overrides, outputs, and what did not apply; composed into the
trainer config through the same Hydra configs and schema validation as `python -m app.train`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional


@dataclass
class Plan:
    base_config: str  # a config name under configs/ (Hydra), e.g. grpo_trainer
    overrides: dict[str, Any] = field(default_factory=dict)  # dotted trainer key -> value, applied in order
    outputs: dict[str, str] = field(default_factory=dict)  # card output parameter -> folder
    not_applicable: list[tuple[str, Any, str]] = field(default_factory=list)  # (parameter, value, why)
    notes: list[str] = field(default_factory=list)  # mappings worth a line: capped defaults, derived batch sizes
    warnings: list[str] = field(default_factory=list)
    # after a successful run: puts the outputs where the card says; gets the validated and the composed config
    finish: Optional[Callable[[Any], None]] = None


def compose_trainer_config(base_config: str, overrides: dict[str, Any]):
    """The DictConfig `python -m app.train --config-name <base_config>` would compose, with `overrides` set key by
    key (values stay typed: no quoting of Hydra override strings). Unknown keys are left for the schema to refuse."""
    from omegaconf import OmegaConf

    from app.config import compose_config

    cfg = compose_config(base_config)
    OmegaConf.set_struct(cfg, False)
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value, merge=False, force_add=True)
    return cfg


def dry_run_text(card: str, plan: Plan, run_cfg: Any) -> str:
    """What `--dry-run` prints: the mapped keys, what does not apply and why, the outputs, the whole trainer config."""
    import dataclasses

    import yaml

    lines = [f"{card}: parameters valid", "", "trainer config keys set from the parameters:"]
    lines += [f"  {key} = {value!r}" for key, value in plan.overrides.items()]
    if plan.notes:
        lines += ["", "notes:"] + [f"  {note}" for note in plan.notes]
    if plan.warnings:
        lines += ["", "warnings:"] + [f"  {w}" for w in plan.warnings]
    lines += ["", "not applicable here (accepted, no effect):"]
    lines += [f"  {name}={value!r}: {why}" for name, value, why in plan.not_applicable] or ["  (none)"]
    lines += ["", "outputs:"] + [f"  {name}: {Path(path).resolve()}" for name, path in plan.outputs.items()]
    tree = dataclasses.asdict(run_cfg)
    if tree["actor_rollout_ref"]["rollout"].get("http_api_key"):  # never printed, as in the logged config
        tree["actor_rollout_ref"]["rollout"]["http_api_key"] = "***"
    lines += ["", "trainer config (validated):", yaml.safe_dump(tree, sort_keys=False).rstrip()]
    return "\n".join(lines)
