"""A run's state (`RunState`, which the trainer holds) and its life on disk (`RunStore`): saving, resuming, exporting.

A checkpoint holds every engine's sharded state, each rank's RNG and self-imitation answers, and rank 0's trainer
state (step, policy version, KL coefficient, data-loader position); it is written into a staging folder and renamed
into place (`app.trainer.checkpoints`), so a crash never leaves a half-written `global_step_<N>`.
"""

from __future__ import annotations

import logging
import os
import pickle
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from app.config.schema import CHECKPOINT_HF, TrainerRunConfig
from app.data.custom_sampler import load_sampler_state, save_sampler_state
from app.trainer import checkpoints
from app.trainer.checkpoint_copy import copy_checkpoint
from app.trainer.collectives import RankGroup
from app.trainer.self_imitation import ReplayBuffer

log = logging.getLogger(__name__)


SAMPLER_STATE_FILE = "data_sampler_state.pt"  # data.sampler's own state_dict(), where it has one


def _split_sampler_state(loader_state: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """(`loader_state` without a custom sampler's own state, that state or None)."""
    sampler = loader_state.get("sampler", {})
    if sampler.get("state") is None:
        return loader_state, None
    return loader_state | {"sampler": {k: v for k, v in sampler.items() if k != "state"}}, sampler["state"]


@dataclass
class RunState:
    """What the loop carries from step to step and a checkpoint keeps: the last finished step, the policy version the
    rollout service serves, the KL controller (its coefficient), the latest validation metrics."""

    step: int
    version: int
    kl_ctrl: Any
    last_val: dict[str, float] = field(default_factory=dict)


class RunStore:
    """Saving, resuming and exporting one run on disk; every rank calls each method together (they hold barriers).

    `critic_engine`: None without a critic; `ref_engine`: the reference's engine where its weights change
    (`ref.sync_ref_model`), else None; `replay_buffer`: None without self-imitation."""

    def __init__(
        self,
        cfg: TrainerRunConfig,
        ranks: RankGroup,
        engine,
        critic_engine,
        tokenizer,
        train_loader,
        replay_buffer: Optional[ReplayBuffer] = None,
        ref_engine=None,
    ) -> None:
        self.cfg, self.ranks, self.replay_buffer = cfg, ranks, replay_buffer
        self.engine, self.critic_engine, self.ref_engine = engine, critic_engine, ref_engine
        self.tokenizer, self.train_loader = tokenizer, train_loader
        self.root = Path(cfg.trainer.default_local_dir)

    def save(self, state: RunState, loader_state: dict[str, Any]) -> Path:
        """All ranks write into a staging folder; rank 0 adds the trainer state and renames it into place. A write
        that fails (a full disk, a lost mount) stops the run with a CheckpointError naming the folder and the
        checkpoint that is still intact; the partial staging folder is removed.

        `loader_state`: the data position of the next batch to train on, even when async_training has generated it
        already (a resumed run then samples it again rather than skipping it)."""
        staging = checkpoints.staging_dir(self.root, state.step, self.cfg.trainer.experiment_name)
        try:
            return self._write(state, loader_state, staging)
        except OSError as err:
            shutil.rmtree(staging, ignore_errors=True)  # frees what it took; it was never the latest
            kept = checkpoints.list_checkpoints(self.root)
            intact = (
                f"the newest complete checkpoint, {kept[-1][1]}, is intact and trainer.resume_mode=auto resumes from it"
                if kept
                else "there is no earlier checkpoint"
            )
            raise checkpoints.CheckpointError(
                f"could not write the checkpoint of step {state.step} into {staging}: {err}; {intact}"
            ) from err

    def _write(self, state: RunState, loader_state: dict[str, Any], staging: Path) -> Path:
        rank = self.ranks.rank
        if rank == 0:
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
        self.ranks.barrier()
        self.engine.save_checkpoint(str(staging / "actor"))
        if CHECKPOINT_HF in self.cfg.actor_rollout_ref.actor.checkpoint.save_contents:
            self._write_hf(staging / "actor" / "huggingface")
        if self.critic_engine is not None:
            self.critic_engine.save_checkpoint(str(staging / "critic"))
        if self.ref_engine is not None:
            self.ref_engine.save_checkpoint(str(staging / "ref"))
        torch.save(_rng_state(), staging / f"rng_rank{rank}.pt")
        if self.replay_buffer is not None:
            torch.save(self.replay_buffer.state_dict(), staging / f"self_imitation_rank{rank}.pt")
        self.ranks.barrier()
        final = checkpoints.step_dir(self.root, state.step)
        if rank == 0:
            loader_state, sampler_state = _split_sampler_state(loader_state)
            if sampler_state is not None:  # a custom sampler's own state: tensors and numpy arrays, not JSON
                save_sampler_state(sampler_state, staging / SAMPLER_STATE_FILE)
            saved = {
                "global_step": state.step,
                "policy_version": state.version,
                "kl_coef": state.kl_ctrl.value,
                "data": loader_state,
                "world_size": self.ranks.world,
            }
            final = checkpoints.publish(self.root, staging, state.step, saved, self.cfg.trainer.max_ckpt_to_keep)
            if self.cfg.trainer.default_hdfs_dir:
                copy_checkpoint(final, state.step, self.cfg.trainer.default_hdfs_dir)
        self.ranks.barrier()
        return final

    def resume(self, state: RunState) -> bool:
        """Load the checkpoint `trainer.resume_mode` names, if any, into the engines, the data loader, the RNGs and
        `state` (step, KL coefficient); True when one was loaded. The caller then pushes the resumed policy: the
        rollout service may be new (version 0) or hold other weights."""
        ckpt = checkpoints.find_resume_dir(self.root, self.cfg.trainer.resume_mode)
        if ckpt is None:
            return False
        saved = checkpoints.read_state(ckpt)
        self.engine.load_checkpoint(str(ckpt / "actor"))
        if self.critic_engine is not None:
            self.critic_engine.load_checkpoint(str(ckpt / "critic"))
        if self.ref_engine is not None:
            if (ckpt / "ref").is_dir():
                self.ref_engine.load_checkpoint(str(ckpt / "ref"))
            elif self.ranks.rank == 0:
                log.warning(
                    "%s holds no reference weights (written without actor_rollout_ref.ref.sync_ref_model): the "
                    "reference restarts from the initial model and moves toward the actor from here on",
                    ckpt,
                )
        data_state = saved["data"]
        if (ckpt / SAMPLER_STATE_FILE).is_file():
            data_state["sampler"]["state"] = load_sampler_state(ckpt / SAMPLER_STATE_FILE)
        self.train_loader.load_state_dict(data_state)
        state.kl_ctrl.value = saved["kl_coef"]
        rng_file = ckpt / f"rng_rank{self.ranks.rank}.pt"
        same_ranks = saved.get("world_size") == self.ranks.world
        if rng_file.is_file() and same_ranks:
            _set_rng_state(rng_file)
        replay_file = ckpt / f"self_imitation_rank{self.ranks.rank}.pt"
        if self.replay_buffer is not None and replay_file.is_file() and same_ranks:
            self.replay_buffer.load_state_dict(torch.load(replay_file, weights_only=True))
        state.step = int(saved["global_step"])
        if self.ranks.rank == 0:
            print(f"resumed from {ckpt} at step {state.step}", flush=True)
        return True

    def export_model(self) -> Path:
        """A Hugging Face folder (LoRA merged) under `default_local_dir/hf_model`, written then renamed."""
        final, staging = self.root / "hf_model", self.root / ".tmp-hf_model"
        if self.ranks.rank == 0:
            shutil.rmtree(staging, ignore_errors=True)
        self.ranks.barrier()
        self._write_hf(staging)
        if self.ranks.rank == 0:
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging, final)
        self.ranks.barrier()
        return final

    def _write_hf(self, folder: Path) -> None:
        """The policy as a Hugging Face folder (LoRA merged) with its tokenizer; collective."""
        self.engine.export_hf(str(folder))
        self.ranks.barrier()
        if self.ranks.rank == 0:
            self.tokenizer.save_pretrained(folder)


def _rng_state() -> dict[str, Any]:
    """Every RNG the step draws from, in plain types and tensors only, so loading needs no unpickling of objects."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
    }


def _set_rng_state(path: Path) -> None:
    try:
        state = torch.load(path, weights_only=True)  # tensors and plain containers; never arbitrary objects
    except pickle.UnpicklingError as err:  # a checkpoint from before: its numpy state was a pickled array
        log.warning("%s holds objects beyond plain data; not restoring the RNG from it (%s)", path, err)
        return
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
