"""Each model folder's config.json reads as a Hugging Face config of a model type transformers knows, before Ray
starts: a type of one's own (registered by a module) or a folder with its own code would otherwise fail in the train
workers, after Ray, Serve and vLLM started. Runs apart (transformers), after the `external_lib` modules imported."""

from __future__ import annotations

from typing import Iterator

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError


def check_model_configs(cfg: TrainerRunConfig) -> None:
    from transformers import AutoConfig

    for key, path, trust_remote_code in _model_folders(cfg):
        try:
            AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        except (ValueError, KeyError, OSError) as err:
            section = key.rsplit(".", 1)[0]
            first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise PreflightError(
                f"{key}={path}: transformers cannot read its config ({first_line}); a model type of your own needs "
                f"the module that registers it in {section}.external_lib, a folder with its own code "
                f"{section}.trust_remote_code=true"
            ) from None


def _model_folders(cfg: TrainerRunConfig) -> Iterator[tuple[str, str, bool]]:
    """(key, folder, trust_remote_code) of each model the run builds from a folder."""
    from algos.catalog import estimator_traits

    policy, critic, rm = cfg.actor_rollout_ref.model, cfg.critic.model, cfg.reward_model
    yield "actor_rollout_ref.model.path", policy.path, policy.trust_remote_code
    if estimator_traits(cfg.algorithm.adv_estimator).needs_critic and critic.path:
        yield "critic.model.path", critic.path, critic.trust_remote_code
    if rm.enable and rm.model.path:
        yield "reward_model.model.path", rm.model.path, rm.model.trust_remote_code
