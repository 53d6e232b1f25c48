"""The learning phases of a step, on the roles: the log-probs the losses need, the advantages, the updates.

- log-probs: the old policy's (the PPO ratio's denominator), the reference's (KL) and the critic's values, each only
  where the config uses it;
- advantages: the KL penalty in the reward (`algorithm.use_kl_in_reward`, adaptive coefficient), then the estimator;
- updates: the critic's, then the actor's once `trainer.critic_warmup` steps are past, with earlier good answers
  replayed (`actor.self_imitation`); with `algorithm.use_pf_ppo` both train on the batch resampled by reward (PF-PPO);
  with `ref.sync_ref_model` the reference then moves toward the actor every `ref_model_sync_steps` steps (TR-DPO);
  `actor.mask_truncated_completions` keeps responses cut at the token limit out of the actor's loss.
"""

from __future__ import annotations

from typing import Any

import torch

from algos.advantages import compute_advantages
from algos.catalog import estimator_traits
from algos.kl import apply_kl_penalty_to_rewards
from algos.masked import masked_mean
from algos.policy_filtration import filtration_sample
from algos.rollout_correction import rollout_is_weights
from app.batch import TensorBatch
from app.config.schema import TrainerRunConfig
from app.trainer.collectives import RankGroup
from app.trainer.rollout_batch import RolloutGroup
from app.trainer.self_imitation import ReplayBuffer
from app.trainer.step_metrics import PhaseTimer


class Learner:
    """The roles of one rank and the config of their phases. `kl_ctrl`: the run's KL controller (its value is part
    of the run state a checkpoint keeps)."""

    def __init__(self, cfg: TrainerRunConfig, *, actor, reference, critic, kl_ctrl: Any, ranks: RankGroup) -> None:
        self.cfg, self.algo = cfg, cfg.algorithm
        self.actor, self.reference, self.critic = actor, reference, critic
        self.kl_ctrl, self.ranks = kl_ctrl, ranks
        self.imitation = imitation = cfg.actor_rollout_ref.actor.self_imitation
        # None: self-imitation is off
        self.replay_buffer = ReplayBuffer(imitation.buffer_size, imitation.min_score) if imitation.coef else None

    def log_probs(self, group: RolloutGroup, timer: PhaseTimer) -> None:
        """Old policy of the PPO ratio: the sampler's (bypass_mode), none on-policy (the update's own), else a pass;
        then the reference's log-probs and the critic's values where they are used."""
        batch = group.batch
        if self.algo.rollout_correction.bypass_mode:
            batch["old_log_probs"] = batch["rollout_log_probs"]
        elif (
            self.algo.use_kl_in_reward
            or self.cfg.actor_rollout_ref.actor.calculate_sum_pi_squared  # a statistic of the old-policy pass
            or not self.actor.is_on_policy(len(batch))
        ):
            with timer.phase("old_log_prob"):
                batch.update(self.actor.compute_log_prob(batch))
        if self.reference is not None:
            with timer.phase("ref"):
                batch.update(self.reference.compute_ref_log_prob(batch))
        if self.critic is not None:
            with timer.phase("values"):
                batch.update(self.critic.compute_values(batch))

    def advantages(self, group: RolloutGroup) -> dict[str, float]:
        """`token_level_rewards`, `advantages` and `returns` into the batch; the KL-in-reward metrics (collective)."""
        batch, algo = group.batch, self.algo
        metrics: dict[str, float] = {}
        if algo.use_kl_in_reward:
            rewards, kl_metrics = apply_kl_penalty_to_rewards(
                batch["token_level_scores"],
                batch["old_log_probs"],
                batch["ref_log_prob"],
                batch["response_mask"],
                self.kl_ctrl.value,
                algo.kl_penalty,
            )
            batch["token_level_rewards"] = rewards
            metrics |= self.ranks.reduce({f"actor/{k}": float(v) for k, v in kl_metrics.items()})
            self.kl_ctrl.update(metrics["actor/reward_kl_penalty"], n_steps=self.cfg.data.train_batch_size)
        else:
            batch["token_level_rewards"] = batch["token_level_scores"]
        advantages, returns = compute_advantages(
            algo.adv_estimator,
            token_level_rewards=batch["token_level_rewards"],
            response_mask=batch["response_mask"],
            index=group.uid,
            values=batch.get("values"),
            gamma=algo.gamma,
            lam=algo.lam,
            norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo,
            reward_baselines=group.extras.get("reward_baselines"),
            old_log_probs=batch.get("old_log_probs"),
            sum_pi_squared=batch.get("sum_pi_squared"),
            rollout_is_weights=self.rollout_is_weights(batch),
            batch_sum=self.ranks.sum_tensor,  # the whole batch's statistics where an estimator takes them
        )
        batch["advantages"], batch["returns"] = advantages, returns
        if "sum_pi_squared" in batch:
            mean = float(masked_mean(batch["sum_pi_squared"], batch["response_mask"]))
            metrics |= self.ranks.reduce({"actor/sum_pi_squared": mean})
        return metrics

    def rollout_is_weights(self, batch: TensorBatch) -> torch.Tensor | None:
        """The truncated importance weights of `algorithm.rollout_correction` for an estimator that weighs tokens by
        them (the optimal token baseline; the losses apply their own), else None."""
        correction = self.algo.rollout_correction
        if not correction.rollout_is or not estimator_traits(self.algo.adv_estimator).needs_sum_pi_squared:
            return None
        weights, _ = rollout_is_weights(
            batch["old_log_probs"],
            batch["rollout_log_probs"],
            batch["response_mask"],
            level=correction.rollout_is,
            threshold=correction.rollout_is_threshold,
        )
        return weights

    def updates_actor(self, step: int) -> bool:
        """Whether `step` updates the actor (the critic alone learns during `trainer.critic_warmup`)."""
        return step > self.cfg.trainer.critic_warmup

    def update(self, group: RolloutGroup, step: int, timer: PhaseTimer) -> dict[str, float]:
        batch, metrics = self.filtered(self.with_truncation_flags(group), step)
        if self.critic is not None:
            with timer.phase("update_critic"):
                metrics |= self.critic.update_critic(batch)
        if self.updates_actor(step):
            replay, replay_metrics = self.replay(group, step)
            with timer.phase("update_actor"):
                metrics |= self.actor.update_policy(without_truncated(batch), replay=replay)
            metrics |= replay_metrics
            ref = self.cfg.actor_rollout_ref.ref
            if ref.sync_ref_model and step % ref.ref_model_sync_steps == 0:
                with timer.phase("sync_ref"):
                    self.reference.move_toward(self.actor.engine, ref.ref_model_mixup_alpha)
        return metrics

    def with_truncation_flags(self, group: RolloutGroup) -> TensorBatch:
        """`group.batch`, with a `truncated` row flag (finish reason "length") where
        `actor.mask_truncated_completions` asks for it: a column, so that it follows the rows through PF-PPO's draw."""
        if not self.cfg.actor_rollout_ref.actor.mask_truncated_completions:
            return group.batch
        batch = TensorBatch(dict(group.batch.tensors), dict(group.batch.meta))
        batch["truncated"] = torch.tensor([reason == "length" for reason in group.finish_reason])
        return batch

    def filtered(self, batch: TensorBatch, step: int) -> tuple[TensorBatch, dict[str, float]]:
        """The batch the updates train on: with `algorithm.use_pf_ppo`, this rank's samples drawn again with
        replacement, each by a weight of its summed reward (`algos.policy_filtration`; verl draws over the whole batch
        on its driver, here each rank over its share, which keeps every rank's row count), else the batch itself. The
        draw is seeded by trainer.seed, the step and the rank, so a resumed run draws the same rows."""
        if not self.algo.use_pf_ppo:
            return batch, {}
        pf = self.algo.pf_ppo
        generator = torch.Generator().manual_seed(hash((self.cfg.trainer.seed, step, self.ranks.rank)) & (2**63 - 1))
        rows = filtration_sample(batch["token_level_scores"].sum(-1), pf.reweight_method, pf.weight_pow, generator)
        distinct = rows.unique().numel() / max(rows.numel(), 1)
        return batch.index(rows), self.ranks.reduce({"training/pf_ppo_distinct_rows": distinct})

    def replay(self, group: RolloutGroup, step: int) -> tuple[TensorBatch | None, dict[str, float]]:
        """The earlier answers this update imitates, drawn before `group`'s own good ones join the buffer (they train
        now as samples); and the `actor/self_imitation_*` metrics (collective)."""
        if self.replay_buffer is None:
            return None, {}
        # every rank replays as many rows: the engines' micro-batch counts must agree
        count = self.ranks.min_int(min(self.imitation.rows_per_step, len(self.replay_buffer)))
        replay = self.replay_buffer.sample(count, step)
        added = self.replay_buffer.add(group.batch, group.extras["task_score"])
        metrics = self.ranks.reduce(
            {"actor/self_imitation_added": added, "actor/self_imitation_kept": len(self.replay_buffer)}
        )
        return replay, metrics | {"actor/self_imitation_rows": float(count)}


def without_truncated(batch: TensorBatch) -> TensorBatch:
    """The actor's batch with the rows flagged `truncated` masked out of every token loss (TRL's
    mask_truncated_completions); the batch itself where nothing is flagged."""
    if "truncated" not in batch:
        return batch
    kept = TensorBatch(dict(batch.tensors), dict(batch.meta))
    kept["response_mask"] = batch["response_mask"] * (~batch["truncated"]).unsqueeze(-1).to(
        batch["response_mask"].dtype
    )
    return kept
