"""The sampler's order is reproducible and a resumed run continues exactly where the saved one stopped."""

import pytest

from app.data import DataError, ResumableBatchSampler


def _take(sampler, n):
    return [sampler.next_batch() for _ in range(n)]


def test_epoch_is_a_permutation_and_reshuffles():
    sampler = ResumableBatchSampler(10, 3, shuffle=True, seed=7)
    assert len(sampler) == 3  # 10 // 3, the last partial batch is dropped
    epoch0 = [i for b in _take(sampler, 3) for i in b]
    epoch1 = [i for b in _take(sampler, 3) for i in b]
    assert len(set(epoch0)) == 9 and len(set(epoch1)) == 9  # no repeats inside an epoch
    assert epoch0 != epoch1  # each epoch reshuffles
    again = ResumableBatchSampler(10, 3, shuffle=True, seed=7)
    assert [i for b in _take(again, 6) for i in b] == epoch0 + epoch1  # same seed, same order


def test_epoch_order_comes_from_seed_plus_epoch():
    a, b = ResumableBatchSampler(50, 5, seed=3), ResumableBatchSampler(50, 5, seed=4)
    assert a.epoch_order(1).tolist() == b.epoch_order(0).tolist()
    assert a.epoch_order(0).tolist() != b.epoch_order(0).tolist()


def test_without_shuffle_file_order_and_keep_last():
    sampler = ResumableBatchSampler(5, 2, shuffle=False, drop_last=False)
    assert len(sampler) == 3
    assert list(sampler) == [[0, 1], [2, 3], [4]]
    assert sampler.epoch == 1 and sampler.batch_in_epoch == 0


def test_iteration_yields_the_rest_of_the_epoch():
    sampler = ResumableBatchSampler(8, 2, shuffle=False)
    sampler.next_batch()
    assert list(sampler) == [[2, 3], [4, 5], [6, 7]]
    assert list(sampler) == [[0, 1], [2, 3], [4, 5], [6, 7]]  # next epoch, from its start


@pytest.mark.parametrize("stop_after", [1, 4, 5, 7, 13])  # mid-epoch, at and across epoch boundaries (5 per epoch)
def test_resume_matches_uninterrupted_run(stop_after):
    total = 16
    reference = _take(ResumableBatchSampler(23, 4, seed=11), total)

    first = ResumableBatchSampler(23, 4, seed=11)
    before = _take(first, stop_after)
    state = first.state_dict()

    resumed = ResumableBatchSampler(23, 4, seed=11)
    resumed.load_state_dict(state)
    after = _take(resumed, total - stop_after)
    assert before + after == reference


def test_state_after_last_batch_points_to_next_epoch():
    sampler = ResumableBatchSampler(6, 2, shuffle=False)
    _take(sampler, 3)
    assert sampler.state_dict()["epoch"] == 1 and sampler.state_dict()["batch_in_epoch"] == 0


def test_resume_with_different_data_is_refused():
    state = ResumableBatchSampler(20, 4, seed=1).state_dict()
    with pytest.raises(DataError, match="dataset_size=20"):
        ResumableBatchSampler(21, 4, seed=1).load_state_dict(state)
    with pytest.raises(DataError, match="seed=1"):
        ResumableBatchSampler(20, 4, seed=2).load_state_dict(state)


def test_dataset_smaller_than_a_batch():
    with pytest.raises(DataError, match="3 prompts, fewer than one batch of 4"):
        ResumableBatchSampler(3, 4)
