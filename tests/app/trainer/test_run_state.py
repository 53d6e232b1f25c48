"""The RNG part of a checkpoint: saved as tensors and plain containers, loaded without unpickling objects, and it
puts every generator the step draws from back where it was."""

import logging
import random

import numpy as np
import torch

from app.trainer.run_state import _rng_state, _set_rng_state


def _draws():
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_rng_state_round_trips_through_a_weights_only_load(tmp_path):
    random.seed(3), np.random.seed(4), torch.manual_seed(5)
    _draws()  # move every generator off its seed
    torch.save(_rng_state(), tmp_path / "rng.pt")
    expected = _draws()
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    _set_rng_state(tmp_path / "rng.pt")
    assert _draws() == expected


def test_a_file_holding_pickled_objects_is_not_loaded(tmp_path, caplog):
    # the old layout kept numpy's state as a pickled array: loading it would mean unpickling arbitrary objects
    torch.save(
        {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
        tmp_path / "old.pt",
    )
    random.seed(7)
    expected = random.random()
    random.seed(7)
    with caplog.at_level(logging.WARNING):
        _set_rng_state(tmp_path / "old.pt")
    assert random.random() == expected  # nothing was restored from it
    assert "not restoring the RNG" in caplog.text
