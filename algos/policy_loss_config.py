"""The policy losses' settings (verl's ``actor.clip_ratio*`` and ``actor.policy_loss.*``), checked once; no torch, so
the config check builds them too."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

# PolicyLossConfig fields that verl keeps under actor.policy_loss; the clip settings sit on actor itself.
_POLICY_LOSS_SECTION = ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef")


@dataclass(frozen=True)
class PolicyLossConfig:
    """Clip settings (verl ``actor.clip_ratio*``). ``clip_ratio_low``/``clip_ratio_high`` default to ``clip_ratio``;
    ``clip_ratio_c`` is the dual-clip bound on the ratio for negative advantages and must be > 1.

    The entropy-mechanism modes' settings (verl ``actor.policy_loss.*``): ``clip_cov`` zeroes at most
    ``clip_cov_ratio`` of the tokens, drawn from those whose covariance lies in ``(clip_cov_lb, clip_cov_ub)``;
    ``kl_cov`` adds ``ppo_kl_coef * |log-ratio|`` to the ``kl_cov_ratio`` of the tokens with the largest covariance.

    Every field is a config key without a default: the defaults are the config schema's (app/config/schema.py,
    ``ActorConfig``), written once there; ``from_mapping`` takes them from the actor section.
    """

    clip_ratio: float
    clip_ratio_low: float | None
    clip_ratio_high: float | None
    clip_ratio_c: float
    clip_cov_ratio: float
    clip_cov_lb: float
    clip_cov_ub: float
    kl_cov_ratio: float
    ppo_kl_coef: float

    def __post_init__(self) -> None:
        for name in ("clip_ratio", "clip_ratio_low", "clip_ratio_high"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"actor.{name} must be >= 0, got {value!r}")
        if not self.clip_ratio_c > 1.0:
            raise ValueError(f"actor.clip_ratio_c must be > 1 (dual-clip lower bound), got {self.clip_ratio_c!r}")
        for name in ("clip_cov_ratio", "kl_cov_ratio"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"actor.policy_loss.{name} must be in (0, 1] (a share of the tokens), got {value!r}")
        if not self.clip_cov_lb < self.clip_cov_ub:
            raise ValueError(
                f"actor.policy_loss.clip_cov_lb={self.clip_cov_lb!r} must be below clip_cov_ub={self.clip_cov_ub!r} "
                "(else clip_cov selects no token)"
            )
        if not self.ppo_kl_coef >= 0:
            raise ValueError(f"actor.policy_loss.ppo_kl_coef must be >= 0, got {self.ppo_kl_coef!r}")

    @property
    def low(self) -> float:
        return self.clip_ratio if self.clip_ratio_low is None else self.clip_ratio_low

    @property
    def high(self) -> float:
        return self.clip_ratio if self.clip_ratio_high is None else self.clip_ratio_high

    @classmethod
    def from_mapping(cls, actor_config: Mapping[str, Any] | Any) -> "PolicyLossConfig":
        """Build from a verl-style ``actor`` section, a mapping or an object with those attribute names (e.g. the
        typed schema): clip settings from the section, the others from its ``policy_loss``. Other keys are ignored;
        an absent one is a ValueError naming it (its default is the schema's, not restated here)."""

        def read(source: Any, name: str, where: str) -> Any:
            present = name in source if isinstance(source, Mapping) else hasattr(source, name)
            if not present:
                raise ValueError(f"{where}{name} is missing: build the loss settings from the whole actor section")
            return source[name] if isinstance(source, Mapping) else getattr(source, name)

        section = read(actor_config, "policy_loss", "actor.")
        return cls(
            **{
                f.name: read(section, f.name, "actor.policy_loss.")
                if f.name in _POLICY_LOSS_SECTION
                else read(actor_config, f.name, "actor.")
                for f in fields(cls)
            }
        )
