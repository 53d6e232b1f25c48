"""The actor: log-probs of sampled responses under the current policy, and the PPO-style policy update.

Talks only to ``BaseEngine``. Settings come from verl's ``actor_rollout_ref.actor`` section (duck-typed: any
object with those attribute names).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from algos.aggregation import agg_loss
from algos.catalog import POLICY_LOSSES, policy_loss_traits
from algos.imitation import self_imitation_loss
from algos.kl import kl_penalty
from algos.masked import masked_count
from algos.policy_loss import resolve_loss_agg_mode
from algos.policy_loss_config import PolicyLossConfig
from algos.rollout_correction import rollout_is_weights
from app.batch import TensorBatch
from app.engine.base import BaseEngine, StepContext
from app.roles.common import MetricMeans, run_ppo_epochs, samples_per_rank

_MODEL_INPUTS = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")


def _present(batch: TensorBatch, keys: tuple[str, ...], required: tuple[str, ...], who: str) -> TensorBatch:
    missing = [k for k in required if k not in batch]
    if missing:
        raise KeyError(f"{who}: batch lacks {missing}; it has {batch.keys()}")
    return batch.select(keys, strict=False)


class Actor:
    """``config``: the ``actor`` section (ppo_mini_batch_size, ppo_epochs, shuffle, clip_ratio*, loss_agg_mode,
    loss_scale_factor, entropy_coeff, use_kl_loss, kl_loss_coef, kl_loss_type, policy_loss.*, self_imitation.coef).
    ``validate()`` fills loss_scale_factor with the response budget; left None (an unvalidated config), the padded
    width is used.

    ``rollout_n``: samples per prompt (mini-batch sizes count prompts). ``log_prob_micro_batch_size`` /
    ``log_prob_use_dynamic_bsz`` / ``log_prob_max_token_len``: the micro-batching of ``compute_log_prob`` (verl
    ``rollout.log_prob_micro_batch_size_per_gpu`` / ``log_prob_use_dynamic_bsz`` / ``log_prob_max_token_len_per_gpu``;
    None: the engine's, i.e. the update's).

    ``rollout_correction``: ``algorithm.rollout_correction``; with ``rollout_is`` set, each token's policy loss is
    weighted by the truncated ratio of the old (proximal) policy over the sampler's (``algos.rollout_correction``).
    """

    def __init__(
        self,
        engine: BaseEngine,
        config: Any,
        *,
        rollout_n: int = 1,
        log_prob_micro_batch_size: Optional[int] = None,
        log_prob_use_dynamic_bsz: Optional[bool] = None,
        log_prob_max_token_len: Optional[int] = None,
        log_prob_max_token_len_key: Optional[str] = None,
        seed: int = 0,
        rollout_correction: Optional[Any] = None,
    ) -> None:
        self.engine = engine
        self.config = config
        self.rollout_n = rollout_n
        self.log_prob_micro_batch_size = log_prob_micro_batch_size
        self.log_prob_use_dynamic_bsz = log_prob_use_dynamic_bsz
        self.log_prob_max_token_len = log_prob_max_token_len
        self.log_prob_max_token_len_key = log_prob_max_token_len_key
        self.seed = seed
        self._updates = 0
        loss_mode = config.policy_loss.loss_mode
        self.policy_loss_fn = POLICY_LOSSES.get(loss_mode)
        self.loss_agg_mode = resolve_loss_agg_mode(loss_mode, config.loss_agg_mode)
        self.policy_loss_config = PolicyLossConfig.from_mapping(config)
        self.rollout_is = rollout_correction if rollout_correction and rollout_correction.rollout_is else None
        if self.rollout_is is not None and not policy_loss_traits(loss_mode).linear_in_advantage:
            raise ValueError(
                f"rollout_is weights reach the loss through the advantages, which policy loss "
                f"{loss_mode!r} is not linear in (algos.catalog.PolicyLossTraits)"
            )

    # ------------------------------------------------------------------ log-probs
    def compute_log_prob(self, batch: TensorBatch, *, calculate_entropy: bool = True) -> TensorBatch:
        """``old_log_probs`` (and ``entropys``; and ``sum_pi_squared`` with ``calculate_sum_pi_squared``) ``(b, R)``
        of ``responses`` at ``batch.meta['temperature']`` (default 1). 0 at padding."""
        inputs = _present(batch, _MODEL_INPUTS, ("input_ids", "attention_mask", "responses"), "compute_log_prob")
        ctx = StepContext(
            temperature=float(batch.meta.get("temperature", 1.0)),
            compute_entropy=calculate_entropy,
            compute_sum_pi_squared=self.config.calculate_sum_pi_squared,
            micro_batch_size=self.log_prob_micro_batch_size,
            use_dynamic_bsz=self.log_prob_use_dynamic_bsz,
            max_token_len=self.log_prob_max_token_len,
            max_token_len_key=self.log_prob_max_token_len_key if self.log_prob_max_token_len else None,
        )
        with torch.no_grad(), self.engine.eval_mode():
            result = self.engine.forward_backward_step(inputs, ctx, forward_only=True)
        out = TensorBatch({"old_log_probs": result.outputs["log_probs"]})
        if calculate_entropy:
            out["entropys"] = result.outputs["entropy"]
        if self.config.calculate_sum_pi_squared:
            out["sum_pi_squared"] = result.outputs["sum_pi_squared"]
        return out

    # ------------------------------------------------------------------ update
    def _loss_fn(self, token_means: MetricMeans, loss_sums: dict[str, float]):
        cfg = self.config

        def loss_fn(out: dict[str, torch.Tensor], micro: TensorBatch, ctx: StepContext):
            mask = micro["response_mask"]
            replay_mask = None
            if "replayed" in micro:  # self-imitation: replayed answers take their own loss, not the policy loss
                replayed = micro["replayed"].to(mask.dtype).unsqueeze(-1)
                replay_mask, mask = mask * replayed, mask * (1 - replayed)
            log_prob = out["log_probs"]
            tokens = float(masked_count(mask))
            if "old_log_probs" in micro:
                old_log_prob = micro["old_log_probs"]
            else:
                # On-policy (one epoch, one mini-batch): the behaviour policy is the current one, so its log-probs are
                # this very forward pass; the trainer skipped the separate old-log-prob pass.
                old_log_prob = log_prob.detach()
                if "rollout_log_probs" in micro:
                    gap = ((old_log_prob - micro["rollout_log_probs"]).abs() * mask).sum() / max(tokens, 1.0)
                    token_means.add("actor/rollout_logprob_diff", float(gap), tokens)
            advantages = micro["advantages"]
            if self.rollout_is is not None:
                # w > 0 per token; the loss is linear in A (checked at construction), so A * w weights each token's
                # clipped loss by w: the decoupled PPO objective
                weights, is_metrics = rollout_is_weights(
                    old_log_prob,
                    micro["rollout_log_probs"],
                    mask,
                    level=self.rollout_is.rollout_is,
                    threshold=self.rollout_is.rollout_is_threshold,
                )
                advantages = advantages * weights
                for name, value in is_metrics.items():
                    token_means.add(f"rollout_corr/{name}", float(value), tokens)
            pg_loss, pg_metrics = self.policy_loss_fn(
                old_log_prob,
                log_prob,
                advantages,
                mask,
                loss_agg_mode=self.loss_agg_mode,
                config=self.policy_loss_config,
                normalizer=ctx.loss_normalizer,
            )
            loss = pg_loss
            # globally normalised micro-batch losses add up to the mini-batch loss
            loss_sums["actor/pg_loss"] = loss_sums.get("actor/pg_loss", 0.0) + float(pg_loss.detach())
            for name, value in pg_metrics.items():  # token means of this micro-batch
                token_means.add(f"actor/{name}", float(value), tokens)
            if "entropy" in out:
                entropy = out["entropy"]
                token_means.add("actor/entropy", float((entropy.detach() * mask).sum()) / max(tokens, 1.0), tokens)
                if cfg.entropy_coeff != 0:
                    entropy_loss = agg_loss(entropy, mask, self.loss_agg_mode, ctx.loss_normalizer)
                    loss = loss - cfg.entropy_coeff * entropy_loss
            if cfg.use_kl_loss:
                kld = kl_penalty(log_prob, micro["ref_log_prob"], cfg.kl_loss_type)
                kl_loss = agg_loss(kld, mask, self.loss_agg_mode, ctx.loss_normalizer)
                loss = loss + cfg.kl_loss_coef * kl_loss
                loss_sums["actor/kl_loss"] = loss_sums.get("actor/kl_loss", 0.0) + float(kl_loss.detach())
            if replay_mask is not None:
                imitation_loss, stats = self_imitation_loss(
                    log_prob, replay_mask, cfg.self_imitation.coef, self.loss_agg_mode, ctx.loss_normalizer
                )
                loss = loss + imitation_loss
                token_means.add(
                    "actor/self_imitation_nll", stats["self_imitation_nll"], float(masked_count(replay_mask))
                )
            return loss, {}

        return loss_fn

    def is_on_policy(self, samples_on_this_rank: int) -> bool:
        """True when the update is one optimiser step on exactly the sampled policy (one epoch, one mini-batch):
        then old log-probs equal the update's own forward pass and need no separate pass."""
        mini_size = samples_per_rank(
            "actor.ppo_mini_batch_size", self.config.ppo_mini_batch_size, self.rollout_n, self.engine.dp_world_size
        )
        return self.config.ppo_epochs == 1 and mini_size >= samples_on_this_rank

    def update_policy(self, batch: TensorBatch, replay: Optional[TensorBatch] = None) -> dict[str, float]:
        """PPO epochs over mini-batches of this rank's share of the batch; one optimizer step per mini-batch and one
        LR-scheduler step per call. Returns ``actor/*`` metrics: per mini-batch over the global (all-rank)
        mini-batch, then averaged over mini-batches and epochs. Same values on every rank.

        ``replay``: earlier answers to imitate (``self_imitation``; model inputs and a ``replayed`` flag of ones),
        added to the first mini-batch with advantage ``self_imitation.coef``; every rank passes as many."""
        cfg = self.config
        required = ["input_ids", "attention_mask", "responses", "response_mask", "advantages"]
        if cfg.use_kl_loss:
            required.append("ref_log_prob")
        if self.rollout_is is not None:
            required.append("rollout_log_probs")
        if "old_log_probs" not in batch and not self.is_on_policy(len(batch)):
            raise KeyError(
                "update_policy: batch lacks old_log_probs, which only an on-policy update (ppo_epochs=1 and "
                "one mini-batch) may leave out"
            )
        keys = (*_MODEL_INPUTS, "old_log_probs", "advantages", "ref_log_prob", "rollout_log_probs")
        data = _present(batch, keys, tuple(required), "update_policy")
        mini_size = samples_per_rank(
            "actor.ppo_mini_batch_size", cfg.ppo_mini_batch_size, self.rollout_n, self.engine.dp_world_size
        )
        temperature = float(batch.meta.get("temperature", 1.0))
        # entropy for the metric always; with a gradient only when it is part of the loss
        ctx_kwargs = dict(temperature=temperature, compute_entropy=True, entropy_requires_grad=cfg.entropy_coeff != 0)
        lr = self.engine.get_lr()
        with self.engine.train_mode():
            per_step = run_ppo_epochs(
                self.engine,
                data,
                epochs=cfg.ppo_epochs,
                mini_batch_size=mini_size,
                shuffle=cfg.shuffle,
                seed=self.seed + 1000 * self._updates,
                loss_agg_mode=self.loss_agg_mode,
                loss_scale_factor=cfg.loss_scale_factor,
                make_loss_fn=self._loss_fn,
                grad_norm_metric="actor/grad_norm",
                ctx_kwargs=ctx_kwargs,
                replay=replay,
            )
        self.engine.lr_scheduler_step()
        self._updates += 1
        metrics = per_step.means()  # over mini-batches and epochs; each value is already global over ranks
        if "rollout_corr/rollout_is_sq_mean" in metrics:  # E[w^2] - E[w]^2 over the tokens
            square = metrics.pop("rollout_corr/rollout_is_sq_mean")
            mean = metrics["rollout_corr/rollout_is_mean"]
            metrics["rollout_corr/rollout_is_std"] = max(0.0, square - mean**2) ** 0.5
        metrics["actor/lr"] = lr
        if cfg.use_kl_loss:
            metrics["actor/kl_coef"] = float(cfg.kl_loss_coef)
        return metrics
