"""The custom reward file's checks, called directly: which signatures the reward managers can call."""

import pytest

from app.config.schema import TrainerRunConfig
from app.preflight import PreflightError
from app.preflight.reward_file import check_reward_function


def _cfg(path, name="compute_score", manager="naive", kwargs=None) -> TrainerRunConfig:
    cfg = TrainerRunConfig()
    cfg.custom_reward_function.path = str(path)
    cfg.custom_reward_function.name = name
    cfg.custom_reward_function.reward_kwargs = kwargs or {}
    cfg.reward_model.reward_manager = manager
    return cfg


@pytest.mark.parametrize(
    "signature",
    [
        "data_source, solution_str, ground_truth, extra_info=None",
        "**kwargs",
        "data_source, solution_str, ground_truth, extra_info, scale=1",
    ],
)
def test_usable_per_sample_signatures_pass(tmp_path, signature):
    reward = tmp_path / "r.py"
    reward.write_text(f"def compute_score({signature}):\n    return 0.0\n")
    check_reward_function(_cfg(reward))


def test_the_batch_manager_needs_the_list_form(tmp_path):
    reward = tmp_path / "r.py"
    reward.write_text(
        "def per_sample(data_source, solution_str, ground_truth, extra_info):\n    return 0.0\n"
        "def batched(data_sources, solution_strs, ground_truths, extra_infos):\n    return []\n"
    )
    check_reward_function(_cfg(reward, "batched", manager="batch"))
    with pytest.raises(
        PreflightError,
        match=r"cannot be called as per_sample\(data_sources=, solution_strs=, "
        r"ground_truths=, extra_infos=\) \(reward_model.reward_manager=batch",
    ):
        check_reward_function(_cfg(reward, "per_sample", manager="batch"))


def test_reward_kwargs_must_be_accepted(tmp_path):
    reward = tmp_path / "r.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return 0.0\n")
    with pytest.raises(PreflightError, match="unexpected keyword argument 'scale'"):
        check_reward_function(_cfg(reward, kwargs={"scale": 2}))


def test_an_error_while_importing_names_the_line(tmp_path):
    reward = tmp_path / "r.py"
    reward.write_text("import os\n\nLIMIT = int(os.environ['NO_SUCH_VARIABLE_HERE'])\n")
    with pytest.raises(PreflightError) as err:
        check_reward_function(_cfg(reward))
    assert str(err.value) == (
        f"custom_reward_function.path={reward}: importing {reward} failed at line 3: KeyError: 'NO_SUCH_VARIABLE_HERE'"
    )


def test_a_folder_is_not_a_reward_file(tmp_path):
    with pytest.raises(PreflightError, match="a folder, not a .py file"):
        check_reward_function(_cfg(tmp_path))
