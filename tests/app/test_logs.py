"""The console's volume: RAYRL_VERBOSE turns the libraries' INFO chatter back on; warnings always show."""

from __future__ import annotations

import logging

import pytest

from app import logs
from serve.log_config import serve_logging_config


@pytest.fixture
def quiet(monkeypatch):
    monkeypatch.delenv(logs.VERBOSE_ENV, raising=False)
    for name in (*logs.QUIET_ENV, *logs.CONSOLE_ENV):
        monkeypatch.delenv(name, raising=False)


def test_a_quiet_run_silences_vllm_serve_access_lines_and_ray_train_info(quiet):
    assert logs.quiet_env() == {
        "VLLM_LOGGING_LEVEL": "ERROR",
        "TORCH_CPP_LOG_LEVEL": "ERROR",
        "TQDM_DISABLE": "1",
        "PYTHONWARNINGS": "ignore::FutureWarning,ignore::DeprecationWarning",
        "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",  # a worker's print reaches the console once (Ray Train's patch: twice)
    }
    assert logs.train_log_level() == "WARNING"
    config = serve_logging_config()
    assert config.enable_access_log is False and config.log_level == "WARNING"


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_rayrl_verbose_turns_them_back_on(quiet, monkeypatch, value):
    monkeypatch.setenv(logs.VERBOSE_ENV, value)
    assert logs.quiet_env() == {logs.VERBOSE_ENV: "1", "RAY_TRAIN_ENABLE_PRINT_PATCH": "0"}
    assert logs.train_log_level() == "INFO"
    config = serve_logging_config()
    assert config.enable_access_log is True and config.log_level == "INFO"


def test_rayrl_verbose_0_is_quiet(quiet, monkeypatch):
    monkeypatch.setenv(logs.VERBOSE_ENV, "0")
    assert not logs.verbose()


def test_a_level_the_user_exported_wins(quiet, monkeypatch):
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    assert "VLLM_LOGGING_LEVEL" not in logs.quiet_env()


def test_ray_trains_per_report_line_is_dropped_unless_verbose(quiet, monkeypatch):
    from ray.train.v2._internal.execution import context

    reports, serve_logger = logging.getLogger(context.__file__), logging.getLogger("ray.serve")
    monkeypatch.setattr(reports, "level", logging.NOTSET)
    monkeypatch.setattr(serve_logger, "level", logging.INFO)
    monkeypatch.setattr(logging.getLogger(logs.NOTICE_LOGGERS[0]), "level", logging.NOTSET)
    logs.quiet_train_reports()
    assert not reports.isEnabledFor(logging.INFO) and reports.isEnabledFor(logging.WARNING)
    assert reports.level == logging.WARNING  # its own level: a root logger at INFO, as in a Ray worker, cannot print
    assert serve_logger.level == logging.WARNING  # "Started <SharedRouterLongPollClient ...>" and the like
    assert logging.getLogger(logs.NOTICE_LOGGERS[0]).level == logging.ERROR  # "token authentication is enabled"
    monkeypatch.setenv(logs.VERBOSE_ENV, "1")
    reports.setLevel(logging.NOTSET)
    logs.quiet_train_reports()
    assert reports.level == logging.NOTSET  # left alone: Ray Train's own configuration decides


def test_app_notices_reach_stderr_at_info_and_other_libraries_only_from_warning(quiet, capsys, monkeypatch):
    app_logger = logging.getLogger("app")
    for name in ("handlers", "level", "propagate"):  # restored after the test
        monkeypatch.setattr(app_logger, name, getattr(app_logger, name))
    monkeypatch.setattr(logging.getLogger("ray.serve"), "level", logging.getLogger("ray.serve").level)
    logs.setup_logging()
    logging.getLogger("app.config.verl_compat").info("data.val_batch_size=8 has no effect here")
    logging.getLogger("app.x").debug("hidden unless verbose")
    err = capsys.readouterr().err
    assert "INFO app.config.verl_compat: data.val_batch_size=8 has no effect here" in err
    assert "hidden unless verbose" not in err


def test_quiet_loggers_drop_the_hub_saves_info_line(quiet):
    # the train worker writes the final model with huggingface_hub, whose INFO line named the temporary folder; its
    # logger is the module's own (named after the file), so a root logger at INFO, as in a Ray worker, would print it
    from huggingface_hub.serialization import _torch as hub_saving

    saver = hub_saving.logger
    root = logging.getLogger()
    before = {name: logging.getLogger(name).level for name in logs.CHATTY_LOGGERS} | {"": root.level}
    before[saver.name] = saver.level
    try:
        root.setLevel(logging.INFO)
        logging.getLogger("huggingface_hub").setLevel(logging.INFO)
        logs.quiet_loggers()
        assert not saver.isEnabledFor(logging.INFO) and saver.isEnabledFor(logging.WARNING)
    finally:  # setLevel, not assignment: it also clears logging's cached answers
        for name, level in before.items():
            logging.getLogger(name or None).setLevel(level)
