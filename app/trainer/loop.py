"""The RL loop one Ray Train worker runs: rollout → reward → log-probs → advantages → update → sync → validate → save.

Data parallelism: every rank reads the same global batch of prompts and takes its own contiguous share, so all the
samples of one prompt (a GRPO group) live on one rank. Each rank asks the rollout service for its share, scores it
and computes its advantages; the engines average gradients over ranks and normalise losses globally. Rank 0 alone
pushes weights to the rollout service, writes metrics and publishes checkpoints. With `async_training` the rollout
of the next batch runs while this one trains (`app.trainer.rollout_ahead`).

This module only orchestrates: each phase is one call into the module that owns it.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from algos.catalog import estimator_traits
from algos.kl_controller import make_kl_controller
from app.config.schema import TrainerRunConfig
from app.data import PromptBatch
from app.trainer.collectives import RankGroup
from app.trainer.curriculum import Curriculum
from app.trainer.dynamic_sampling import FILTER_COUNTS, fill_with_informative_groups, filter_metric
from app.trainer.learner import Learner
from app.trainer.multi_turn import agent_rollout, multi_turn_metrics, trajectory_group
from app.trainer.ray_metrics import publish_step_metrics
from app.trainer.rollout_ahead import RolloutAhead, running_ahead, staleness_metrics
from app.trainer.rollout_batch import RolloutGroup, decode_responses, dump_rollouts, sampled_group
from app.trainer.run_state import RunState, RunStore
from app.trainer.scoring import RewardScorer, greedy_baselines, score_group
from app.trainer.signal_guard import NoSignalGuard
from app.trainer.step_metrics import BadStepGuard, PhaseTimer, step_metrics
from app.trainer.validation import validate
from app.trainer.weight_sync import RolloutService, RolloutSync


class RLTrainer:
    """Holds the roles, the data and the run state of one rank. Build with `app.trainer.setup.build_trainer`, which
    also fills `trainer.total_training_steps`."""

    def __init__(
        self,
        cfg: TrainerRunConfig,
        *,
        tokenizer,
        train_loader,
        val_dataset,
        actor,
        reference,
        critic,
        rollout: RolloutService,
        scorer: RewardScorer,
        report: Optional[Callable[[dict[str, float]], None]] = None,
        tracking=None,
    ) -> None:
        self.cfg, self.tokenizer, self.train_loader, self.val_dataset = cfg, tokenizer, train_loader, val_dataset
        self.scorer, self.tracking = scorer, tracking
        self.report = report or (lambda metrics: None)
        self.engine = actor.engine
        self.ranks = RankGroup(self.engine)
        self.rank, self.world = self.ranks.rank, self.ranks.world
        self.curriculum = Curriculum(train_loader, self.ranks)  # data.sampler: rank 0's order; its update(batch)
        rollout_cfg, kl = cfg.actor_rollout_ref.rollout, cfg.algorithm.kl_ctrl
        # colocated GPU placement: vLLM frees its memory while the trainer runs, unless rollout.free_cache_engine=false
        self.rollout = RolloutSync(
            rollout,
            self.ranks,
            self.engine,
            lora_sync=rollout_cfg.lora_sync,
            model_path=cfg.actor_rollout_ref.model.path,
            dtype=getattr(torch, rollout_cfg.dtype),  # what vLLM computes in: half the bytes
            sleeps=cfg.trainer.placement == "colocated" and rollout_cfg.free_cache_engine,
            fold_round_to=rollout_cfg.lora_fold_dtype and getattr(torch, rollout_cfg.lora_fold_dtype),
        )
        self.agents = agent_rollout(cfg, rollout, tokenizer)  # multi-turn tool use (app/agents); None: single-turn
        self.state = RunState(
            step=0,
            version=self.rollout.served_version(),
            kl_ctrl=make_kl_controller(kl.type, kl.kl_coef, kl.target_kl, kl.horizon),
        )
        self.learner = Learner(
            cfg, actor=actor, reference=reference, critic=critic, kl_ctrl=self.state.kl_ctrl, ranks=self.ranks
        )
        self.store = RunStore(
            cfg,
            self.ranks,
            self.engine,
            critic.engine if critic is not None else None,
            tokenizer,
            train_loader,
            replay_buffer=self.learner.replay_buffer,
            ref_engine=reference.engine if cfg.actor_rollout_ref.ref.sync_ref_model else None,
        )
        self.total_steps = cfg.trainer.total_training_steps
        self.bad_steps = BadStepGuard(cfg.trainer.max_bad_steps)
        self.no_signal = NoSignalGuard(cfg.trainer.no_signal_steps, cfg.trainer.no_signal_share)
        self.ahead: Optional[RolloutAhead] = None  # async_training: the generation running ahead, during fit

    @property
    def step(self) -> int:
        return self.state.step

    # ------------------------------------------------------------------ the loop
    def fit(self) -> dict[str, float]:
        state = self.state
        resumed = self.store.resume(state)
        if resumed:
            state.version = self.rollout.served_version()
        if resumed or state.version != 0:  # a reused rollout service holds another run's policy, not ours
            self.sync_weights()
        val_only = self.cfg.trainer.val_only
        if val_only or (self.cfg.trainer.val_before_train and state.step == 0):
            state.last_val = self.validate()
            self._log(state.last_val, step=state.step)
        if val_only:  # the model it would train from, validated: nothing is trained, saved or exported
            return state.last_val
        with running_ahead(
            self.cfg.async_training,
            self.total_steps - state.step,
            self._next_prompts,
            self.train_loader.state_dict,
            self.generate,
        ) as self.ahead:
            while state.step < self.total_steps:
                self.train_step()
        self.ahead = None
        self.store.export_model()
        return state.last_val

    def train_step(self) -> None:
        state, timer, trainer_cfg = self.state, PhaseTimer(), self.cfg.trainer
        state.step += 1
        with timer.phase("step"):
            group, metrics = self.collect_rollouts(timer)  # rollout, reward
            metrics |= self.no_signal.watch(state.step, group, self.ranks)  # warns when no group can teach anything
            self.rollout.release_memory()  # colocated: the GPU memory goes to the trainer until the next sync
            if trainer_cfg.rollout_data_dir:
                dump_rollouts(
                    trainer_cfg.rollout_data_dir,
                    state.step,
                    self.rank,
                    group,
                    decode_responses(self.tokenizer, group.batch),
                    self.cfg.reward_model.overlong_buffer.log,
                )
            self.learner.log_probs(group, timer)
            with timer.phase("adv"):
                metrics |= self.learner.advantages(group)
            metrics |= self.learner.update(group, state.step, timer)
            self.curriculum.learn(group, state.step, state.version)  # a sampler that learns from the trained batch
            if self.learner.updates_actor(state.step):
                if self.ahead is not None:
                    self.ahead.drain()  # outside "sync": timing_s/gen_wait counts this wait
                with timer.phase("sync"):
                    self.sync_weights()
            self.rollout.wake_up()  # a critic warm-up step syncs nothing, but the next rollout needs vLLM
            bad = self.bad_steps.observe(state.step, metrics)  # skipped updates; raises after max_bad_steps
            if self._due(trainer_cfg.test_freq) or state.step == self.total_steps:
                with timer.phase("testing"):
                    state.last_val = self.validate()
                metrics |= state.last_val
            if self._due(trainer_cfg.save_freq) and not bad:  # checkpoints only of good steps
                with timer.phase("save_checkpoint"):
                    self.store.save(state, self._loader_state())
        extra = (self.ahead.take_timings() if self.ahead is not None else {}) | self.rollout.fault_metrics()
        metrics |= step_metrics(
            group.batch,
            timer,
            self.ranks,
            self.cfg.actor_rollout_ref.rollout.response_length,
            extra,
            means=multi_turn_metrics(group),
        )
        metrics["training/policy_version"] = float(state.version)
        metrics["training/epoch"] = float(self.train_loader.epoch)
        self._log(metrics, state.step)
        # No malloc_trim between steps: glibc keeps the update's freed pages for the next one. Trimming gave them
        # back, and faulting them in again made the update 1-2 s slower in the Ray worker (README, speed).

    # ------------------------------------------------------------------ phases
    def collect_rollouts(self, timer: PhaseTimer) -> tuple[RolloutGroup, dict[str, float]]:
        """Generate and score this rank's share of the next prompts. With `algorithm.filter_groups`, rounds repeat
        on fresh prompts until the batch holds only groups whose samples disagree (DAPO's dynamic sampling)."""

        def one_round() -> tuple[RolloutGroup, dict[str, float]]:
            if self.ahead is not None:  # sampled while the previous update ran (async_training)
                group = self.ahead.next(self.state.version)
            else:
                prompts = self._next_prompts()
                with timer.phase("gen"):
                    group = self.generate(prompts, self.state.version)
            with timer.phase("reward"):
                return group, score_group(
                    self.scorer,
                    self.tokenizer,
                    group,
                    self.cfg.reward_model.overlong_buffer,
                    self.cfg.actor_rollout_ref.rollout.response_length,
                    self.ranks,
                )

        fg = self.cfg.algorithm.filter_groups
        if not fg.enable:
            group, metrics = one_round()
            return group, metrics | staleness_metrics(group, self.state.version, self.cfg.async_training)
        group, metrics, counts = fill_with_informative_groups(
            one_round,
            lambda g: filter_metric(g, fg.metric),
            self.cfg.data.train_batch_size // self.world,
            fg.max_num_gen_batches,
            self.ranks.min_int,
            self.train_loader.pad_token_id,
        )
        totals = self.engine.all_reduce(torch.tensor([float(counts[k]) for k in FILTER_COUNTS]), "sum")
        metrics |= {f"filter_groups/{k}_groups": float(v) for k, v in zip(FILTER_COUNTS, totals.tolist())}
        metrics["train/num_gen_batches"] = float(counts["rounds"])  # verl's name
        return group, metrics

    def generate(self, prompts: PromptBatch, version: int) -> RolloutGroup:
        """`n` samples for each prompt of this rank's share, all made by policy `version` (the service's)."""
        if self.agents is not None:  # multi-turn: trajectories, tool results masked out of response_mask
            return trajectory_group(
                self.agents,
                prompts,
                version,
                self.train_loader.pad_token_id,
                self.cfg.actor_rollout_ref.rollout.temperature,
            )
        samples = self.rollout.service.generate(prompts.raw_prompt_ids, expect_version=version)
        group = sampled_group(
            prompts, samples, version, self.train_loader.pad_token_id, self.cfg.actor_rollout_ref.rollout.temperature
        )
        if estimator_traits(self.cfg.algorithm.adv_estimator).needs_greedy_baseline:  # ReMax
            group.extras["reward_baselines"] = greedy_baselines(
                self.rollout.service,
                self.scorer,
                self.tokenizer,
                prompts,
                self.cfg.actor_rollout_ref.rollout.n,
                version,
            )
        return group

    def sync_weights(self) -> None:
        """Push the new weights (or LoRA adapter) as version + 1; every rank then expects it."""
        if self.ahead is not None:
            self.ahead.drain()  # no batch may be sampled half by the old weights, half by the new
        self.rollout.push(self.state.version + 1)
        self.state.version += 1

    def validate(self) -> dict[str, float]:
        """Greedy decoding on this rank's share of the validation prompts; mean reward per `data_source`. Rank 0 hands
        `trainer.log_val_generations` of the samples to the loggers that keep tables."""
        metrics, samples = validate(
            self.agents or self.rollout.service,
            self.scorer,
            self.tokenizer,
            self.val_dataset,
            self.ranks,
            self.state.version,
            keep_samples=self.cfg.trainer.log_val_generations,
            dump_dir=self.cfg.trainer.validation_data_dir,
            step=self.state.step,
        )
        if samples and self.tracking is not None:
            self.tracking.log_generations(samples, self.state.step)
        return metrics

    # ------------------------------------------------------------------ helpers
    def _next_prompts(self) -> PromptBatch:
        """This rank's contiguous share of the next global batch of prompts."""
        return self.train_loader.next_batch().rank_share(self.rank, self.world)

    def _loader_state(self) -> dict[str, Any]:
        """The data position a checkpoint keeps: that of the next batch to train on (`RunStore.save`)."""
        return self.ahead.loader_state() if self.ahead is not None else self.train_loader.state_dict()

    def _due(self, freq: int) -> bool:
        return freq > 0 and self.state.step % freq == 0

    def _log(self, metrics: dict[str, float], step: int) -> None:
        self.report(metrics)
        if self.rank == 0 and self.tracking is not None:
            self.tracking.log(metrics, step)
            publish_step_metrics(self.cfg, metrics, step)  # Ray dashboard / Prometheus
