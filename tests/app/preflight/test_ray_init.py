"""ray_kwargs.ray_init names only ray.init's arguments; unset ones (verl's num_cpus: null) are left to the run."""

import pytest

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError
from app.preflight.ray_init import check_ray_init, ray_init_arguments


def test_unset_arguments_are_dropped_and_known_ones_kept():
    given = {"num_cpus": None, "include_dashboard": False, "runtime_env": {"env_vars": {"A": "1"}}}
    assert ray_init_arguments(given) == {"include_dashboard": False, "runtime_env": {"env_vars": {"A": "1"}}}
    check_ray_init(TrainerRunConfig())  # verl's default, {num_cpus: null}


def test_a_name_ray_init_lacks_is_refused_with_the_near_one():
    with pytest.raises(
        PreflightError,
        match=r"^ray_kwargs\.ray_init\.num_cpu: ray\.init has no argument 'num_cpu'; "
        r"did you mean num_cpus\?$",
    ):
        ray_init_arguments({"num_cpu": 4})
