"""Coefficient of the in-reward KL penalty (``algorithm.kl_ctrl.*``): fixed, or adapted towards a target KL.

The adaptive rule (Ziegler et al. 2019, "Fine-Tuning Language Models from Human Preferences") multiplies the
coefficient after each batch by ``1 + clip(kl / target - 1, -0.2, 0.2) * n_steps / horizon``: it grows while the
measured KL is above target and shrinks while below, by at most 20% per ``horizon`` steps.
"""

from __future__ import annotations

_CLIP = 0.2


class FixedKLController:
    """Constant coefficient; ``update`` does nothing."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        del current_kl, n_steps

    def __repr__(self) -> str:
        return f"FixedKLController(value={self.value})"


class AdaptiveKLController:
    """Proportional controller driving the measured KL towards ``target_kl`` on a time scale of ``horizon`` steps."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: float) -> None:
        if not target_kl > 0:
            raise ValueError(f"algorithm.kl_ctrl.target_kl must be > 0 for the adaptive controller, got {target_kl!r}")
        if not horizon > 0:
            raise ValueError(f"algorithm.kl_ctrl.horizon must be > 0 for the adaptive controller, got {horizon!r}")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """``current_kl``: the batch's mean KL; ``n_steps``: samples (responses) in that batch."""
        error = min(max(float(current_kl) / self.target - 1.0, -_CLIP), _CLIP)
        self.value *= 1.0 + error * n_steps / self.horizon

    def __repr__(self) -> str:
        return f"AdaptiveKLController(value={self.value}, target={self.target}, horizon={self.horizon})"


KL_CONTROLLER_TYPES: tuple[str, ...] = ("fixed", "adaptive")


def make_kl_controller(
    type: str, kl_coef: float, target_kl: float, horizon: float
) -> FixedKLController | AdaptiveKLController:
    """Controller for ``algorithm.kl_ctrl.type`` from the ``algorithm.kl_ctrl`` keys (their defaults are the config
    schema's); ``target_kl`` and ``horizon`` are read by the adaptive controller only."""
    if type == "fixed":
        return FixedKLController(kl_coef)
    if type == "adaptive":
        return AdaptiveKLController(kl_coef, target_kl, horizon)
    raise ValueError(f"unknown algorithm.kl_ctrl.type={type!r}; known types: {', '.join(KL_CONTROLLER_TYPES)}")
