"""ray.init's arguments: the run's own with the user's ray_kwargs.ray_init over them, for a cluster the run starts
and for one it joins."""

import logging

import pytest

from app.config.errors import ConfigError
from app.trainer.ray_init import joining_kwargs, merged_runtime_env, starting_kwargs

OURS = {
    "address": "local",
    "num_cpus": 6,
    "runtime_env": {"env_vars": {"TOKENIZERS_PARALLELISM": "false", "RAY_DEDUP_LOGS": "1"}},
    "include_dashboard": True,
    "log_to_driver": True,
    "_system_config": {"prestart_worker_first_driver": False},
}


def test_runtime_env_merges_variable_by_variable_and_the_users_win():
    user = {"env_vars": {"RAY_DEDUP_LOGS": "0", "JUDGE_URL": "http://j"}, "working_dir": "/w"}
    merged = merged_runtime_env(OURS["runtime_env"], user)
    assert merged == {
        "env_vars": {"TOKENIZERS_PARALLELISM": "false", "RAY_DEDUP_LOGS": "0", "JUDGE_URL": "http://j"},
        "working_dir": "/w",
    }
    assert merged_runtime_env(OURS["runtime_env"], None) == OURS["runtime_env"]


def test_a_cluster_the_run_starts_takes_the_users_values_over_the_runs():
    user = {
        "num_cpus": 32,
        "include_dashboard": False,
        "_temp_dir": "/scratch/ray",
        "_system_config": {"automatic_object_spilling_enabled": False},
        "runtime_env": {"env_vars": {"JUDGE_URL": "http://j"}},
    }
    kwargs = starting_kwargs(OURS, user, cpus_needed=6)
    assert kwargs["num_cpus"] == 32 and kwargs["include_dashboard"] is False and kwargs["_temp_dir"] == "/scratch/ray"
    # the run's system config and variables stay beside the user's
    assert kwargs["_system_config"] == {
        "prestart_worker_first_driver": False,
        "automatic_object_spilling_enabled": False,
    }
    assert kwargs["runtime_env"]["env_vars"] == {
        "TOKENIZERS_PARALLELISM": "false",
        "RAY_DEDUP_LOGS": "1",
        "JUDGE_URL": "http://j",
    }
    assert kwargs["address"] == "local" and kwargs["log_to_driver"] is True
    # without the dashboard, each worker first quiets Ray Train's placement-group cleaner, whose state query then
    # fails every second
    assert kwargs["runtime_env"]["worker_process_setup_hook"] == "app.logs.quiet_dashboardless_worker"
    assert starting_kwargs(OURS, {}, cpus_needed=6) == OURS


def test_the_users_own_setup_hook_stays_and_the_cleaners_lines_are_said(caplog):
    user = {"include_dashboard": False, "runtime_env": {"worker_process_setup_hook": "mine.setup"}}
    with caplog.at_level(logging.WARNING, logger="app.trainer.ray_init"):
        kwargs = starting_kwargs(OURS, user, cpus_needed=6)
    assert kwargs["runtime_env"]["worker_process_setup_hook"] == "mine.setup"
    assert "include_dashboard=false: Ray Train's placement-group cleaner" in caplog.text


def test_the_dashboardless_hook_quiets_the_cleaners_logger(monkeypatch):
    from app.logs import DASHBOARDLESS_LOGGERS, quiet_dashboardless_worker

    monkeypatch.delenv("RAYRL_VERBOSE", raising=False)
    cleaner = logging.getLogger(DASHBOARDLESS_LOGGERS[0])
    monkeypatch.setattr(cleaner, "level", logging.NOTSET)
    quiet_dashboardless_worker()
    assert cleaner.level == logging.ERROR  # its per-second WARNING is dropped, an ERROR still shows


def test_fewer_cpus_than_the_run_holds_are_refused():
    with pytest.raises(ConfigError, match=r"^ray_kwargs\.ray_init\.num_cpus=4: the run holds 6 CPUs on the cluster"):
        starting_kwargs(OURS, {"num_cpus": 4}, cpus_needed=6)


def test_joining_leaves_out_what_only_a_starting_cluster_takes(caplog):
    ours = {"address": "10.0.0.1:6379", "runtime_env": OURS["runtime_env"], "log_to_driver": True}
    user = {"num_cpus": 32, "include_dashboard": False, "namespace": "rl", "runtime_env": {"env_vars": {"A": "1"}}}
    with caplog.at_level(logging.WARNING, logger="app.trainer.ray_init"):
        kwargs = joining_kwargs(ours, user, "10.0.0.1:6379")
    assert "num_cpus" not in kwargs and "include_dashboard" not in kwargs
    assert kwargs["namespace"] == "rl" and kwargs["runtime_env"]["env_vars"]["A"] == "1"
    assert kwargs["runtime_env"]["env_vars"]["TOKENIZERS_PARALLELISM"] == "false"
    assert "include_dashboard, num_cpus set up a cluster the run starts; it joins 10.0.0.1:6379" in caplog.text
