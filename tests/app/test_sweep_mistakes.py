"""`python -m app.sweep` with one mistake each: exit 2, one line naming the nearest valid key, no Ray started."""

from __future__ import annotations

from entry_run import run_entry


def _sweep(tmp_path, *args: str) -> str:
    done = run_entry("app.sweep", list(args), cwd=tmp_path)
    assert done.code == 2, (done.code, done.stderr_lines[-20:])
    assert not done.ray_init_called
    return done.error


def test_a_misspelt_sweep_key_names_the_nearest(tmp_path):
    assert (
        _sweep(tmp_path, "search.num_sample=3") == "error: unknown key search.num_sample; did you mean "
        "search.num_samples?"
    )


def test_a_searched_key_that_is_misspelt_names_the_trainer_key_meant(tmp_path):
    line = _sweep(tmp_path, "~params", "+params={actor_rollout_ref.actor.optim.lrr:{grid:[1e-5,1e-4]}}")
    assert line == (
        "error: sweep params: unknown key actor_rollout_ref.actor.optim.lrr; did you mean "
        "actor_rollout_ref.actor.optim.lr?"
    )


def test_a_misspelt_base_override_names_the_trainer_key_meant(tmp_path):
    line = _sweep(tmp_path, "base.overrides=['trainer.total_training_step=4']")
    assert line == (
        "error: sweep base.overrides: unknown key trainer.total_training_step; did you mean "
        "trainer.total_training_steps?"
    )
