"""The RL loop one Ray Train worker runs: rollout → reward → log-probs → advantages → update → sync → validate → save.

Data parallelism: every rank reads the same global batch of prompts and takes its own contiguous share, so all the
samples of one prompt (a GRPO group) live on one rank. Each rank asks the rollout service for its share, scores it
and computes its advantages; the engines average gradients over ranks and normalise losses globally. Rank 0 alone
pushes weights to the rollout service, writes metrics and publishes checkpoints. With `async_training` the rollout
of the next batch runs while this one trains (`app.trainer.rollout_ahead`).
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

import torch

from algos.advantages import compute_advantages, estimator_traits
from algos.kl import apply_kl_penalty_to_rewards
from algos.kl_controller import make_kl_controller
from algos.rewards.overlong import overlong_penalty
from algos.rewards.token_level import scores_to_token_rewards
from app.batch import TensorBatch
from app.config.schema import TrainerRunConfig
from app.data import PromptBatch
from app.trainer.bad_steps import BadStepGuard
from app.trainer.collectives import RankGroup
from app.trainer.dynamic_sampling import FILTER_COUNTS, fill_with_informative_groups, filter_metric
from app.trainer.multi_turn import agent_rollout, multi_turn_metrics, trajectory_group
from app.trainer.ray_metrics import publish_step_metrics
from app.trainer.rollout_ahead import RolloutAhead, running_ahead, staleness_metrics
from app.trainer.rollout_batch import RolloutGroup, build_rollout_batch
from app.trainer.rollout_dump import dump_rollouts
from app.trainer.run_state import RunStateMixin
from app.trainer.scoring import greedy_baselines
from app.trainer.services import RewardScorer, RolloutService
from app.trainer.signal_guard import NoSignalGuard, group_counts
from app.trainer.step_metrics import batch_metrics, max_min_metrics
from app.trainer.timing import PhaseTimer
from app.trainer.validation import validate
from app.trainer.weight_payload import rollout_payload
from serve.types import FullWeights

log = logging.getLogger(__name__)


class RLTrainer(RunStateMixin):
    """Holds the roles, the data and the loop state of one rank. Build with `app.trainer.setup.build_trainer`."""

    def __init__(self, cfg: TrainerRunConfig, *, tokenizer, train_loader, val_dataset, actor, reference, critic,
                 rollout: RolloutService, scorer: RewardScorer,
                 report: Optional[Callable[[dict[str, float]], None]] = None, tracking=None) -> None:
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.train_loader = train_loader
        self.val_dataset = val_dataset
        self.actor, self.reference, self.critic = actor, reference, critic
        self.engine = actor.engine
        self.rollout = rollout
        self.agents = agent_rollout(cfg, rollout, tokenizer)  # multi-turn tool use (app/agents); None: single-turn
        self.scorer = scorer
        self.report = report or (lambda metrics: None)
        self.tracking = tracking
        self.ranks = RankGroup(self.engine)
        self.rank, self.world = self.ranks.rank, self.ranks.world
        algo = cfg.algorithm
        self.kl_ctrl = make_kl_controller(algo.kl_ctrl.type, algo.kl_ctrl.kl_coef, algo.kl_ctrl.target_kl,
                                          algo.kl_ctrl.horizon)
        self.n = cfg.actor_rollout_ref.rollout.n
        # colocated GPU placement: vLLM frees its memory while the trainer runs, unless rollout.free_cache_engine=false
        self.rollout_sleeps = cfg.trainer.placement == "colocated" and cfg.actor_rollout_ref.rollout.free_cache_engine
        self.rollout_asleep = False
        self.sync_dtype = getattr(torch, cfg.actor_rollout_ref.rollout.dtype)  # what vLLM computes in: half the bytes
        self.temperature = cfg.actor_rollout_ref.rollout.temperature
        self.step = 0
        self.version = self._rollout_version()
        self.total_steps = self._total_steps()
        self.last_val: dict[str, float] = {}
        self.bad_steps = BadStepGuard(cfg.trainer.max_bad_steps)
        self.no_signal = NoSignalGuard(cfg.trainer.no_signal_steps, cfg.trainer.no_signal_share)
        self.ahead: Optional[RolloutAhead] = None  # async_training: the generation running ahead, during fit

    # ------------------------------------------------------------------ the loop
    def fit(self) -> dict[str, float]:
        if not self.resume() and self.version != 0:
            self.sync_weights()  # a reused rollout service holds another run's policy, not our initial weights
        if self.cfg.trainer.val_before_train and self.step == 0:
            self.last_val = self.validate()
            self._log(self.last_val, step=0)
        with running_ahead(self.cfg.async_training, self.total_steps - self.step, self._next_prompts,
                           self.train_loader.state_dict, self.generate) as self.ahead:
            self._train_steps()
        self.ahead = None
        self.export_model()
        return self.last_val

    def _train_steps(self) -> None:
        while self.step < self.total_steps:
            self.step += 1
            timer = PhaseTimer()
            with timer.phase("step"):
                group, metrics = self.collect_rollouts(timer)
                metrics |= self.watch_signal(group)
                if self.rollout_sleeps:
                    self._rollout_sleep()  # give the GPU memory back to the trainer until the next sync
                if self.cfg.trainer.rollout_data_dir:
                    dump_rollouts(self.cfg.trainer.rollout_data_dir, self.step, self.rank, group,
                                  self._decode(group.batch), self.cfg.reward_model.overlong_buffer.log)
                self.set_old_log_probs(group, timer)
                if self.reference is not None:
                    with timer.phase("ref"):
                        group.batch.update(self.reference.compute_ref_log_prob(group.batch))
                if self.critic is not None:
                    with timer.phase("values"):
                        group.batch.update(self.critic.compute_values(group.batch))
                with timer.phase("adv"):
                    metrics |= self.compute_advantages(group)
                if self.critic is not None:
                    with timer.phase("update_critic"):
                        metrics |= self.critic.update_critic(group.batch)
                if self.step > self.cfg.trainer.critic_warmup:
                    with timer.phase("update_actor"):
                        metrics |= self.actor.update_policy(group.batch)
                    if self.ahead is not None:
                        self.ahead.drain()  # outside "sync": timing_s/gen_wait counts this wait
                    with timer.phase("sync"):
                        self.sync_weights()
                if self.rollout_asleep:  # a critic warm-up step syncs nothing, but the next rollout needs vLLM
                    self._rollout_wake_up()
                bad = self.bad_steps.observe(self.step, metrics)  # skipped updates; raises after max_bad_steps
                if self._due(self.cfg.trainer.test_freq) or self.step == self.total_steps:
                    with timer.phase("testing"):
                        self.last_val = self.validate()
                    metrics |= self.last_val
                if self._due(self.cfg.trainer.save_freq) and not bad:  # checkpoints only of good steps
                    with timer.phase("save_checkpoint"):
                        self.save_checkpoint()
            metrics |= self.ranks.reduce(
                batch_metrics(group.batch, self.cfg.actor_rollout_ref.rollout.response_length)
                | multi_turn_metrics(group),
                max_min_metrics(group.batch))
            metrics |= timer.metrics() | (self.ahead.take_timings() if self.ahead is not None else {})
            metrics |= self._rollout_fault_metrics()
            tokens = self.ranks.sum(float(group.batch["attention_mask"].sum()))
            metrics["perf/throughput"] = tokens / max(timer.seconds["step"], 1e-9)
            metrics["training/policy_version"] = float(self.version)
            metrics["training/epoch"] = float(self.train_loader.epoch)
            self._log(metrics, self.step)
            # No malloc_trim between steps: glibc keeps the update's freed pages for the next one. Trimming gave them
            # back, and faulting them in again made the update 1-2 s slower in the Ray worker (README, speed).

    # ------------------------------------------------------------------ phases
    def collect_rollouts(self, timer: PhaseTimer) -> tuple[RolloutGroup, dict[str, float]]:
        """Generate and score this rank's share of the next prompts. With `algorithm.filter_groups`, rounds repeat
        on fresh prompts until the batch holds only groups whose samples disagree (DAPO's dynamic sampling)."""
        def one_round() -> tuple[RolloutGroup, dict[str, float]]:
            if self.ahead is not None:  # sampled while the previous update ran (async_training)
                group = self.ahead.next(self.version)
            else:
                prompts = self._next_prompts()
                with timer.phase("gen"):
                    group = self.generate(prompts, self.version)
            with timer.phase("reward"):
                return group, self.score(group)

        fg = self.cfg.algorithm.filter_groups
        if not fg.enable:
            group, metrics = one_round()
            return group, metrics | staleness_metrics(group, self.version, self.cfg.async_training)
        group, metrics, counts = fill_with_informative_groups(
            one_round, lambda g: filter_metric(g, fg.metric), self.cfg.data.train_batch_size // self.world,
            fg.max_num_gen_batches, self.ranks.min_int, self.train_loader.pad_token_id)
        totals = self.engine.all_reduce(torch.tensor([float(counts[k]) for k in FILTER_COUNTS]), "sum")
        metrics |= {f"filter_groups/{k}_groups": float(v) for k, v in zip(FILTER_COUNTS, totals.tolist())}
        metrics["train/num_gen_batches"] = float(counts["rounds"])  # verl's name
        return group, metrics

    def watch_signal(self, group: RolloutGroup) -> dict[str, float]:
        """The share of groups whose samples scored unlike (all ranks); rank 0 warns after a stretch without any."""
        informative, groups = group_counts(group.batch["token_level_scores"].sum(dim=-1), group.uid)
        metrics, warning = self.no_signal.observe(self.step, self.ranks.sum(informative), self.ranks.sum(groups))
        if warning and self.rank == 0:
            log.warning(warning)
        return metrics

    def generate(self, prompts: PromptBatch, version: int) -> RolloutGroup:
        """`n` samples for each prompt of this rank's share, all made by policy `version` (the service's)."""
        if self.agents is not None:  # multi-turn: trajectories, tool results masked out of response_mask
            return trajectory_group(self.agents, prompts, version, self.train_loader.pad_token_id, self.temperature)
        samples = self.rollout.generate(prompts.raw_prompt_ids, expect_version=version)
        prompt_ids = [prompts.raw_prompt_ids[s.prompt_index] for s in samples]
        batch = build_rollout_batch(prompt_ids, [s.response_token_ids for s in samples], [s.logprobs for s in samples],
                                    self.train_loader.pad_token_id)
        batch.meta["temperature"] = self.temperature
        pick = [s.prompt_index for s in samples]
        group = RolloutGroup(batch=batch, uid=[prompts.uid[i] for i in pick],
                             dataset_index=[prompts.index[i] for i in pick],
                             data_source=[prompts.data_source[i] for i in pick],
                             ground_truth=[prompts.ground_truth[i] for i in pick],
                             extra_info=[prompts.extra_info[i] for i in pick],
                             messages=[prompts.raw_prompt[i] for i in pick],
                             finish_reason=[s.finish_reason for s in samples], policy_version=version)
        if estimator_traits(self.cfg.algorithm.adv_estimator).needs_greedy_baseline:  # ReMax
            group.extras["reward_baselines"] = greedy_baselines(self.rollout, self.scorer, self.tokenizer, prompts,
                                                                self.n, version)
        return group

    def score(self, group: RolloutGroup) -> dict[str, float]:
        """Rule / custom / model rewards → `token_level_scores` (the score on each response's last token)."""
        texts = self._decode(group.batch)
        scores, metrics, extra = self.scorer.score(texts, group.data_source, group.ground_truth, group.extra_info,
                                                   group.messages)
        mask = group.batch["response_mask"]
        group.extras["task_score"] = list(scores)
        if "acc" in extra:
            group.extras["acc"] = extra["acc"]
        rewards = torch.tensor(scores, dtype=torch.float32)
        overlong = self.cfg.reward_model.overlong_buffer
        if overlong.enable:
            penalty = overlong_penalty(mask.sum(dim=1), self.cfg.actor_rollout_ref.rollout.response_length,
                                       overlong.len, overlong.penalty_factor)
            rewards = rewards + penalty
            group.extras["overlong_penalty"] = penalty.tolist()
            metrics |= {"reward/overlong_penalty/mean": float(penalty.mean()),
                        "reward/overlong_ratio": float((penalty < 0).float().mean())}
        # on the last response token: the last real one, which a multi-turn row's mask alone would not find
        ends = group.batch["attention_mask"][:, -mask.shape[1]:].sum(dim=1)
        group.batch["token_level_scores"] = scores_to_token_rewards(rewards, ends, mask.shape[1])
        return self.ranks.reduce(metrics)

    def compute_advantages(self, group: RolloutGroup) -> dict[str, float]:
        batch, algo = group.batch, self.cfg.algorithm
        metrics: dict[str, float] = {}
        if algo.use_kl_in_reward:
            rewards, kl_metrics = apply_kl_penalty_to_rewards(
                batch["token_level_scores"], batch["old_log_probs"], batch["ref_log_prob"], batch["response_mask"],
                self.kl_ctrl.value, algo.kl_penalty)
            batch["token_level_rewards"] = rewards
            metrics |= self.ranks.reduce({f"actor/{k}": float(v) for k, v in kl_metrics.items()})
            self.kl_ctrl.update(metrics["actor/reward_kl_penalty"], n_steps=self.cfg.data.train_batch_size)
        else:
            batch["token_level_rewards"] = batch["token_level_scores"]
        advantages, returns = compute_advantages(
            algo.adv_estimator, token_level_rewards=batch["token_level_rewards"], response_mask=batch["response_mask"],
            index=group.uid, values=batch.get("values"), gamma=algo.gamma, lam=algo.lam,
            norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo,
            reward_baselines=group.extras.get("reward_baselines"))
        batch["advantages"], batch["returns"] = advantages, returns
        return metrics

    def set_old_log_probs(self, group: RolloutGroup, timer: PhaseTimer) -> None:
        """Old policy of the PPO ratio: the sampler's (bypass_mode), none on-policy (the update's own), else a pass."""
        if self.cfg.algorithm.rollout_correction.bypass_mode:
            group.batch["old_log_probs"] = group.batch["rollout_log_probs"]
        elif self.cfg.algorithm.use_kl_in_reward or not self.actor.is_on_policy(len(group.batch)):
            with timer.phase("old_log_prob"):
                group.batch.update(self.actor.compute_log_prob(group.batch))

    def sync_weights(self) -> None:
        """Push the new weights (or LoRA adapter) as version + 1; every rank then expects it."""
        if self.ahead is not None:
            self.ahead.drain()  # no batch may be sampled half by the old weights, half by the new
        if self.rollout_asleep:
            self._rollout_wake_up()
        wire = rollout_payload(self.engine, lora_sync=self.cfg.actor_rollout_ref.rollout.lora_sync,
                               model_path=self.cfg.actor_rollout_ref.model.path, dtype=self.sync_dtype)
        if self.rank == 0:
            self.rollout.update_weights(self.version + 1, wire)
        elif isinstance(wire, FullWeights):
            for _ in wire.tensors:  # the gathers rank 0 runs while it sends
                pass
        self.ranks.barrier()
        self.version += 1

    def validate(self) -> dict[str, float]:
        """Greedy decoding on this rank's share of the validation prompts; mean reward per `data_source`. Rank 0 hands
        `trainer.log_val_generations` of the samples to the loggers that keep tables."""
        metrics, samples = validate(self.agents or self.rollout, self.scorer, self.tokenizer, self.val_dataset,
                                    self.ranks, self.version, keep_samples=self.cfg.trainer.log_val_generations)
        if samples and self.tracking is not None:
            self.tracking.log_generations(samples, self.step)
        return metrics

    # ------------------------------------------------------------------ helpers
    def _next_prompts(self) -> PromptBatch:
        """This rank's contiguous share of the next global batch of prompts."""
        return self.train_loader.next_batch().rank_share(self.rank, self.world)

    def _decode(self, batch: TensorBatch) -> list[str]:
        ids = [row[mask.bool()].tolist() for row, mask in zip(batch["responses"], batch["response_mask"])]
        return self.tokenizer.batch_decode(ids, skip_special_tokens=True)

    def _rollout_sleep(self) -> None:
        """Colocated GPU placement: every rank has finished sampling before the engines release their memory."""
        self.ranks.barrier()
        if self.rank == 0:
            self.rollout.sleep()
        self.ranks.barrier()
        self.rollout_asleep = True

    def _rollout_wake_up(self) -> None:
        if self.rank == 0:
            self.rollout.wake_up()
        self.ranks.barrier()
        self.rollout_asleep = False

    def _rollout_fault_metrics(self) -> dict[str, float]:
        """Rollout replicas that died under this step's calls (each counted once, whichever ranks met it) and the
        calls resent to their replacements (`serve.replica_retry`)."""
        dead, resent = self.rollout.take_faults()
        return {"rollout/replica_restarts": float(len(self.ranks.union(dead))),
                "rollout/retried_requests": self.ranks.sum(float(resent))}

    def _rollout_version(self) -> int:  # the version every replica serves; they agree after any completed sync
        versions = set(self.rollout.replica_versions().values())
        if len(versions) != 1:
            raise RuntimeError(f"rollout replicas disagree on the policy version: {sorted(versions)}")
        return versions.pop()

    def _total_steps(self) -> int:
        return self.cfg.trainer.total_training_steps or len(self.train_loader) * self.cfg.trainer.total_epochs

    def _due(self, freq: int) -> bool:
        return freq > 0 and self.step % freq == 0

    def _log(self, metrics: dict[str, float], step: int) -> None:
        self.report(metrics)
        if self.rank == 0 and self.tracking is not None:
            self.tracking.log(metrics, step)
            publish_step_metrics(self.cfg, metrics, step)  # Ray dashboard / Prometheus

