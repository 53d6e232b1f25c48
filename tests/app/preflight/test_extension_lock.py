"""A DeepSpeed run is refused before Ray starts while a killed op build's lock file would make it wait forever."""

import os
import time
from pathlib import Path

import pytest

from app.config.schema import TrainerRunConfig
from app.preflight import PreflightError
from app.preflight.extension_lock import STALE_AFTER_S, check_extension_locks, extensions_root, stale_locks


def _lock(folder: Path, age_s: float) -> Path:
    folder.mkdir(parents=True)
    lock = folder / "lock"
    lock.touch()
    then = time.time() - age_s
    os.utime(lock, (then, then))
    return lock


def _deepspeed_cfg() -> TrainerRunConfig:
    cfg = TrainerRunConfig()
    cfg.actor_rollout_ref.actor.strategy = "deepspeed"
    return cfg


def test_the_root_is_torchs_choice_the_variable_first_then_the_cache_folder(tmp_path):
    assert extensions_root({"TORCH_EXTENSIONS_DIR": "/x/ext"}) == Path("/x/ext")
    assert extensions_root({"XDG_CACHE_HOME": "/c"}) == Path("/c/torch_extensions")
    assert extensions_root({}, home=tmp_path) == tmp_path / ".cache" / "torch_extensions"


def test_only_locks_older_than_any_build_count_in_either_layout(tmp_path):
    old_default = _lock(tmp_path / "py311_cpu" / "deepspeed_shm_comm", STALE_AFTER_S + 600)
    old_flat = _lock(tmp_path / "cpu_adam", STALE_AFTER_S + 60)
    _lock(tmp_path / "py311_cpu" / "building_now", 30)  # a live build holds its lock for minutes
    found = stale_locks(tmp_path, time.time())
    assert [lock for lock, _ in found] == [old_default, old_flat]  # oldest first
    assert found[0][1] == pytest.approx(STALE_AFTER_S + 600, abs=5)


def test_a_deepspeed_run_is_refused_naming_the_file_and_how_to_remove_it(tmp_path):
    lock = _lock(tmp_path / "py311_cpu" / "deepspeed_shm_comm", 40 * 60)
    with pytest.raises(PreflightError) as err:
        check_extension_locks(_deepspeed_cfg(), env={"TORCH_EXTENSIONS_DIR": str(tmp_path)})
    message = str(err.value)
    assert message.startswith("actor_rollout_ref.actor.strategy=deepspeed: ")
    assert f"rm {lock}" in message
    assert "'deepspeed_shm_comm' op" in message and "40 minutes ago" in message


def test_a_deepspeed_critic_is_checked_where_the_estimator_trains_one(tmp_path):
    _lock(tmp_path / "cpu_adam", 40 * 60)
    cfg = TrainerRunConfig()
    cfg.critic.strategy = "deepspeed"
    cfg.algorithm.adv_estimator = "grpo"
    check_extension_locks(cfg, env={"TORCH_EXTENSIONS_DIR": str(tmp_path)})  # GRPO trains no critic: builds nothing
    cfg.algorithm.adv_estimator = "gae"  # PPO's critic does
    with pytest.raises(PreflightError, match="^critic.strategy=deepspeed: .*'cpu_adam' op"):
        check_extension_locks(cfg, env={"TORCH_EXTENSIONS_DIR": str(tmp_path)})


def test_fsdp_runs_and_clean_folders_pass(tmp_path):
    _lock(tmp_path / "py311_cpu" / "deepspeed_shm_comm", 40 * 60)
    check_extension_locks(TrainerRunConfig(), env={"TORCH_EXTENSIONS_DIR": str(tmp_path)})  # fsdp2 builds nothing
    check_extension_locks(_deepspeed_cfg(), env={"TORCH_EXTENSIONS_DIR": str(tmp_path / "empty")})


def test_several_locks_are_all_named_in_the_command(tmp_path):
    older = _lock(tmp_path / "cpu_adam", 60 * 60)
    newer = _lock(tmp_path / "deepspeed_shm_comm", 30 * 60)
    with pytest.raises(PreflightError) as err:
        check_extension_locks(_deepspeed_cfg(), env={"TORCH_EXTENSIONS_DIR": str(tmp_path)})
    assert f"{older} (and 1 more) is a build lock left 60 minutes ago" in str(err.value)
    assert f"Remove them (rm {older} {newer})" in str(err.value)
