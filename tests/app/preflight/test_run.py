"""Running the checks: order, skipping by name, the child process, and a check added by another module."""

import pytest

from app.config.schema import TrainerRunConfig
from app.preflight import CHECKS, Check, PreflightError, run_preflight
from app.preflight import run as run_module


def _refuse(cfg):
    raise PreflightError(f"refused {cfg.trainer.seed}")


@pytest.mark.parametrize("apart", [False, True])
def test_an_added_check_runs_in_its_place_and_its_error_reaches_the_caller(monkeypatch, apart):
    monkeypatch.setattr(run_module, "CHECKS", [Check("always_refuses", _refuse, apart=apart)])
    cfg = TrainerRunConfig()
    cfg.trainer.seed = 7
    with pytest.raises(PreflightError, match="^refused 7$"):
        run_preflight(cfg)
    run_preflight(cfg, skip=("always_refuses",))


def test_an_unknown_name_to_skip_is_a_mistake_of_the_caller():
    with pytest.raises(ValueError, match="no checks named"):
        run_preflight(TrainerRunConfig(), skip=("http_prot",))


def test_the_checks_run_in_their_order_across_the_child_process(monkeypatch, tmp_path):
    log = tmp_path / "order.txt"

    def note(name):
        def check(cfg):
            with open(log, "a") as f:
                f.write(name + "\n")

        return check

    monkeypatch.setattr(
        run_module,
        "CHECKS",
        [
            Check("a", note("a")),
            Check("b", note("b"), apart=True),
            Check("c", note("c"), apart=True),
            Check("d", note("d")),
        ],
    )
    run_preflight(TrainerRunConfig())
    assert log.read_text().split() == ["a", "b", "c", "d"]


def test_the_cluster_is_asked_first_and_the_cheap_checks_come_before_the_child():
    names = [c.name for c in CHECKS]
    assert names[0] == "cluster_address"
    first_apart = next(i for i, c in enumerate(CHECKS) if c.apart)
    assert {"model_path", "context_length", "http_port"} <= set(names[:first_apart])


@pytest.mark.parametrize("apart", [False, True])
def test_what_a_check_returns_comes_back_by_name(monkeypatch, apart):
    monkeypatch.setattr(
        run_module,
        "CHECKS",
        [
            Check("counts", lambda cfg: (cfg.trainer.seed, 2), apart=apart),
            Check("silent", lambda cfg: None, apart=apart),
        ],
    )
    cfg = TrainerRunConfig()
    cfg.trainer.seed = 5
    assert run_preflight(cfg) == {"counts": (5, 2)}


def test_the_data_check_runs_in_the_child_after_the_tokenizer():
    names = [c.name for c in CHECKS]
    assert names.index("tokenizer") + 1 == names.index("data") and CHECKS[names.index("data")].apart
