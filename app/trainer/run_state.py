"""Saving, resuming and exporting a run: the part of `RLTrainer` that writes and reads its state on disk.

A checkpoint holds every engine's sharded state, each rank's RNG, and rank 0's trainer state (step, policy version,
KL coefficient, data-loader position); it is written into a staging folder and renamed into place
(`app.trainer.checkpoints`), so a crash never leaves a half-written `global_step_<N>`.
"""
from __future__ import annotations

import logging
import os
import pickle
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from app.trainer import checkpoints

log = logging.getLogger(__name__)


class RunStateMixin:
    """Mixed into `RLTrainer`; uses its cfg, ranks, engines, loader, KL controller, step and version."""

    def save_checkpoint(self) -> Path:
        """All ranks write into a staging folder; rank 0 adds the trainer state and renames it into place. A write
        that fails (a full disk, a lost mount) stops the run with a CheckpointError naming the folder and the
        checkpoint that is still intact; the partial staging folder is removed."""
        root = Path(self.cfg.trainer.default_local_dir)
        staging = checkpoints.staging_dir(root, self.step, self.cfg.trainer.experiment_name)
        try:
            return self._write_checkpoint(root, staging)
        except OSError as err:
            shutil.rmtree(staging, ignore_errors=True)  # frees what it took; it was never the latest
            kept = checkpoints.list_checkpoints(root)
            intact = (f"the newest complete checkpoint, {kept[-1][1]}, is intact and trainer.resume_mode=auto "
                      "resumes from it" if kept else "there is no earlier checkpoint")
            raise checkpoints.CheckpointError(
                f"could not write the checkpoint of step {self.step} into {staging}: {err}; {intact}") from err

    def _write_checkpoint(self, root: Path, staging: Path) -> Path:
        if self.rank == 0:
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
        self.ranks.barrier()
        self.engine.save_checkpoint(str(staging / "actor"))
        if self.critic is not None:
            self.critic.engine.save_checkpoint(str(staging / "critic"))
        torch.save(_rng_state(), staging / f"rng_rank{self.rank}.pt")
        self.ranks.barrier()
        final = checkpoints.step_dir(root, self.step)
        if self.rank == 0:
            state = {"global_step": self.step, "policy_version": self.version, "kl_coef": self.kl_ctrl.value,
                     "data": self._loader_state(), "world_size": self.world}
            final = checkpoints.publish(root, staging, self.step, state, self.cfg.trainer.max_ckpt_to_keep)
        self.ranks.barrier()
        return final

    def _loader_state(self) -> dict[str, Any]:
        """The data position a checkpoint keeps: that of the next batch to train on, even when async_training has
        generated it already (a resumed run then samples it again rather than skipping it)."""
        return self.ahead.loader_state() if self.ahead is not None else self.train_loader.state_dict()

    def resume(self) -> bool:
        """Load the checkpoint `trainer.resume_mode` names, if any; True when one was loaded."""
        root = Path(self.cfg.trainer.default_local_dir)
        ckpt = checkpoints.find_resume_dir(root, self.cfg.trainer.resume_mode)
        if ckpt is None:
            return False
        state = checkpoints.read_state(ckpt)
        self.engine.load_checkpoint(str(ckpt / "actor"))
        if self.critic is not None:
            self.critic.engine.load_checkpoint(str(ckpt / "critic"))
        self.train_loader.load_state_dict(state["data"])
        self.kl_ctrl.value = state["kl_coef"]
        rng_file = ckpt / f"rng_rank{self.rank}.pt"
        if rng_file.is_file() and state.get("world_size") == self.world:
            _set_rng_state(rng_file)
        self.step = int(state["global_step"])
        # The rollout service may be new (version 0) or hold other weights: push the resumed policy.
        self.version = self._rollout_version()
        self.sync_weights()
        if self.rank == 0:
            print(f"resumed from {ckpt} at step {self.step}", flush=True)
        return True

    def export_model(self) -> Path:
        """A Hugging Face folder (LoRA merged) under `default_local_dir/hf_model`, written then renamed."""
        root = Path(self.cfg.trainer.default_local_dir)
        final, staging = root / "hf_model", root / ".tmp-hf_model"
        if self.rank == 0:
            shutil.rmtree(staging, ignore_errors=True)
        self.ranks.barrier()
        self.engine.export_hf(str(staging))
        self.ranks.barrier()
        if self.rank == 0:
            self.tokenizer.save_pretrained(staging)
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging, final)
        self.ranks.barrier()
        return final


def _rng_state() -> dict[str, Any]:
    """Every RNG the step draws from, in plain types and tensors only, so loading needs no unpickling of objects."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": random.getstate(), "torch": torch.get_rng_state(),
            "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached]}


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
