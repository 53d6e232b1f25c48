"""data.sampler: a user's sampler class loaded and built as verl builds it, its indices batched as verl's train loader
batches them, its errors named, and a resumed run drawing what the uninterrupted one drew."""

import io
import textwrap

import numpy as np
import pytest
import torch

from app.config.schema import DataConfig
from app.data import DataError, PromptDataLoader, PromptRecord
from app.data.custom_sampler import (
    CustomBatchSampler,
    SamplerRows,
    build_custom_sampler,
    data_config_dict,
    load_sampler_class,
    load_sampler_state,
    sampler_state_bytes,
    save_sampler_state,
)
from app.data.dataset import PromptDataset


def _dataset(n):
    records = [
        PromptRecord(
            prompt_ids=[100 + i],
            messages=[{"role": "user", "content": f"q{i}"}],
            data_source="arithmetic" if i % 2 else "gsm8k",
            ground_truth=str(i),
            extra_info={"index": 1000 + i},
            ability=None,
            where=f"f row {i}",
        )
        for i in range(n)
    ]
    return PromptDataset(records, files=["f"])


class Seeded:
    """A permutation per epoch from the seed in data_config and the number of epochs begun (torch's RandomSampler
    with a generator behaves alike)."""

    def __init__(self, data_source, data_config):
        self.n, self.seed, self.epochs = len(data_source), int(data_config.seed), 0

    def __iter__(self):
        rng = np.random.default_rng(self.seed + self.epochs)
        self.epochs += 1
        return iter(rng.permutation(self.n))  # numpy integers: taken as ints

    def __len__(self):
        return self.n


class Learning(Seeded):
    """Learns a weight per prompt from update() and keeps it in its state (numpy arrays, as samplers commonly do)."""

    def __init__(self, data_source, data_config):
        super().__init__(data_source, data_config)
        self.weights = np.ones(self.n)

    def __iter__(self):
        rng = np.random.default_rng(int(self.weights.sum() * 1000) + self.epochs)
        self.epochs += 1
        return iter(rng.choice(self.n, size=self.n, p=self.weights / self.weights.sum()).tolist())

    def update(self, batch):
        np.add.at(self.weights, batch.non_tensor_batch["dataset_index"], 1.0)

    def state_dict(self):
        return {"weights": self.weights.copy(), "epochs": self.epochs}

    def load_state_dict(self, state):
        self.weights, self.epochs = state["weights"].copy(), state["epochs"]


def _custom(cls, n=10, batch=3, seed=5):
    data = DataConfig(seed=seed)
    return CustomBatchSampler(cls(SamplerRows(_dataset(n)), _omega(data)), n, batch, f"t.py:{cls.__name__}")


def _omega(data):
    from omegaconf import OmegaConf

    return OmegaConf.create(data_config_dict(data))


def test_batches_drop_the_short_end_of_each_epoch_and_number_themselves():
    sampler = _custom(Seeded)  # 10 indices an epoch in batches of 3: three batches, the tenth index dropped
    assert len(sampler) == 3
    drawn = [sampler.draw() for _ in range(4)]
    assert [(e, b) for e, b, _ in drawn] == [(0, 0), (0, 1), (0, 2), (1, 0)]
    first_epoch = [i for _, _, batch in drawn[:3] for i in batch]
    assert sorted(first_epoch) == sorted(np.random.default_rng(5).permutation(10)[:9].tolist())
    assert all(type(i) is int for i in first_epoch)
    assert drawn[3][2] == np.random.default_rng(6).permutation(10)[:3].tolist()  # the second epoch's own order


def test_loader_uids_follow_the_custom_batches():
    loader = PromptDataLoader(_dataset(10), batch_size=3, pad_token_id=0, batch_sampler=_custom(Seeded))
    uids = [loader.next_batch().uid for _ in range(4)]
    assert uids[0] == ["e0-b0-0", "e0-b0-1", "e0-b0-2"] and uids[3] == ["e1-b0-0", "e1-b0-1", "e1-b0-2"]
    assert loader.epoch == 1


@pytest.mark.parametrize("cls", [Seeded, Learning])
@pytest.mark.parametrize("stop_after", [1, 3, 4, 7])  # mid-epoch, at and across epoch ends (3 batches an epoch)
def test_resume_draws_what_the_uninterrupted_run_drew(cls, stop_after):
    def run(sampler, steps):
        out = []
        for _ in range(steps):
            _, _, batch = sampler.draw()
            out.append(batch)
            if hasattr(sampler.sampler, "update"):  # a curriculum learns from each batch, as the loop's update
                sampler.update(_batch_of(batch))
        return out

    reference = run(_custom(cls), 9)
    first = _custom(cls)
    before = run(first, stop_after)
    state = first.state_dict()
    resumed = _custom(cls)
    resumed.load_state_dict(state)
    assert before + run(resumed, 9 - stop_after) == reference
    if cls is Learning:  # its learned weights came back from the saved state: 1 each, and 1 per index drawn
        assert state["state"]["now"]["weights"].sum() == 10 + 3 * stop_after


def _batch_of(indices):
    from app.data.custom_sampler import SamplerBatch

    return SamplerBatch({}, {"uid": np.asarray(indices, dtype=object), "dataset_index": np.asarray(indices)})


def test_state_is_a_copy_taken_when_asked():
    # async training keeps the state of the position before a batch drawn ahead; later learning must not change it
    sampler = _custom(Learning)
    state = sampler.state_dict()
    sampler.update(_batch_of([0, 1, 2]))
    assert state["state"]["now"]["weights"].sum() == 10 and sampler.sampler.weights.sum() == 13


def test_resume_refuses_another_sampler_or_dataset():
    state = _custom(Seeded).state_dict()
    with pytest.raises(DataError, match="data.sampler"):
        _custom(Learning).load_state_dict(state)
    with pytest.raises(DataError, match="dataset_size"):
        _custom(Seeded, n=11).load_state_dict(state)
    with pytest.raises(DataError, match="batch_size=3"):
        _custom(Seeded, batch=2).load_state_dict(state)


class _Yields:
    def __init__(self, values):
        self.values = values

    def __iter__(self):
        return iter(self.values)


@pytest.mark.parametrize(
    "values, message",
    [
        ([0, 1, 10], r"yielded 10: .* integers from 0 to 9"),
        ([0, -1, 2], r"yielded -1"),
        ([0, 1.5, 2], r"yielded 1.5"),
        (["0", 1, 2], r"yielded '0'"),
        ([0, 1], r"yielded 2 indices for a whole epoch, fewer than one batch of data.gen_batch_size=3"),
    ],
)
def test_bad_indices_are_named(values, message):
    with pytest.raises(DataError, match=message):
        CustomBatchSampler(_Yields(values), 10, 3, "t.py:Bad").draw()


def test_rows_are_verl_rows():
    rows = SamplerRows(_dataset(3))
    assert len(rows) == 3
    assert rows[1] == {
        "data_source": "arithmetic",
        "reward_model": {"ground_truth": "1"},
        "extra_info": {"index": 1001},
        "ability": None,
        "raw_prompt": [{"role": "user", "content": "q1"}],
        "raw_prompt_ids": [101],
        "index": 1001,  # verl's: the row's extra_info.index
        "dataset_index": 1,  # the position a sampler yields
    }


def test_data_config_holds_verl_keys_and_the_samplers_own_settings():
    data = DataConfig(train_batch_size=8, gen_batch_size=16, seed=3)
    data.sampler.class_path, data.sampler.class_name = "s.py", "S"
    data.sampler.options = {"tau": 0.5, "warmup": {"steps": 4}}
    config = _omega(data)
    assert config.seed == 3 and config.gen_batch_size == 16 and config.train_batch_size == 8
    assert config.sampler.class_path == "s.py" and config.sampler.tau == 0.5 and config.sampler.warmup.steps == 4
    assert "options" not in config.sampler


def test_load_class_from_a_file_or_a_module(tmp_path, monkeypatch):
    (tmp_path / "my_samplers.py").write_text("class Easy:\n    pass\n\nclass Hard:\n    pass\n")
    assert load_sampler_class(str(tmp_path / "my_samplers.py"), "Easy").__name__ == "Easy"
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_sampler_class("pkg://my_samplers", "Hard").__name__ == "Hard"


@pytest.mark.parametrize(
    "path, name, message",
    [
        ("missing.py", "S", r"data.sampler.class_path=.*missing.py: no such file"),
        ("DIR", "S", r"a folder, not a .py file"),
        ("samplers.py", "Esay", r"data.sampler.class_name=Esay: .* defines no class Esay; did you mean Easy\?"),
        ("samplers.py", "make", r"defines no class make; classes there: Easy"),  # a function is not a class
        ("samplers.py", None, r"needs data.sampler.class_name"),
        ("broken.py", "S", r"importing .*broken.py failed: ZeroDivisionError"),
        ("pkg://no_such_module_here", "S", r"importing module no_such_module_here failed: ModuleNotFoundError"),
    ],
)
def test_load_errors_name_the_key(tmp_path, path, name, message):
    (tmp_path / "samplers.py").write_text("class Easy:\n    pass\n\ndef make():\n    pass\n")
    (tmp_path / "broken.py").write_text("x = 1 / 0\n")
    given = path if path.startswith("pkg://") else str(tmp_path if path == "DIR" else tmp_path / path)
    with pytest.raises(DataError, match=message):
        load_sampler_class(given, name)


def test_build_passes_the_rows_and_the_data_config(tmp_path):
    (tmp_path / "s.py").write_text(
        textwrap.dedent(
            """
            class ByScore:
                def __init__(self, data_source, data_config):
                    self.order = sorted(range(len(data_source)), key=lambda i: data_source[i]["index"], reverse=True)
                    self.take = int(data_config.sampler.take)

                def __iter__(self):
                    return iter(self.order[: self.take])

            class Raises:
                def __init__(self, data_source, data_config):
                    raise ValueError("needs sampler.take")

            class NoIter:
                def __init__(self, data_source, data_config):
                    pass
            """
        )
    )
    data = DataConfig(gen_batch_size=2)
    data.sampler.class_path, data.sampler.class_name = str(tmp_path / "s.py"), "ByScore"
    data.sampler.options = {"take": 4}
    sampler = build_custom_sampler(data, _dataset(6), batch_size=2)
    assert [sampler.next_batch() for _ in range(3)] == [[5, 4], [3, 2], [5, 4]]  # the highest extra_info.index first
    assert len(sampler) == 3  # no len(): the dataset's 6 prompts in batches of 2
    data.sampler.class_name = "Raises"
    with pytest.raises(DataError, match=r"Raises\(data_source=..., data_config=...\) failed: ValueError: needs"):
        build_custom_sampler(data, _dataset(6), batch_size=2)
    data.sampler.class_name = "NoIter"
    with pytest.raises(DataError, match="NoIter has no __iter__"):
        build_custom_sampler(data, _dataset(6), batch_size=2)


def test_state_round_trips_numpy_and_tensors_and_refuses_objects(tmp_path):
    state = {"weights": np.arange(3.0), "counts": np.arange(3), "t": torch.ones(2), "n": np.int64(4), "s": ["a", None]}
    save_sampler_state(state, tmp_path / "state.pt")
    back = load_sampler_state(tmp_path / "state.pt")
    assert np.array_equal(back["weights"], state["weights"]) and back["counts"].dtype == np.int64
    assert torch.equal(back["t"], state["t"]) and back["n"] == 4 and back["s"] == ["a", None]
    for bad in ({"names": np.array(["a"], dtype=object)}, {"f": lambda: 1}, {"obj": io.BytesIO()}):
        with pytest.raises(DataError, match="state_dict\\(\\) holds what a checkpoint does not load back"):
            sampler_state_bytes(bad)


def test_a_learning_sampler_without_a_state_is_resumed_with_a_warning(caplog):
    class Forgets(Seeded):
        def update(self, batch):
            pass

    first = _custom(Forgets)
    first.draw()
    resumed = _custom(Forgets)
    with caplog.at_level("WARNING"):
        resumed.load_state_dict(first.state_dict())
    assert "learns from each batch (update) but has no state_dict" in caplog.text
    assert resumed.draw() == first.draw()  # the order itself follows the seed: it continues where it stopped
