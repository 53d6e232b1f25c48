"""RankGroup's reductions, over a stand-in engine that averages or maxes two ranks' values."""
import torch

from app.trainer.collectives import RankGroup


class _TwoRanks:
    """The engine's all_reduce as rank 0 sees it when rank 1 contributed `other(tensor)`."""
    dp_rank, dp_world_size = 0, 2

    def __init__(self, other):
        self.other = other

    def all_reduce(self, tensor, op="sum"):
        both = torch.stack([tensor, self.other(tensor)])
        return {"sum": both.sum(0), "mean": both.mean(0), "max": both.max(0).values}[op]


def test_reduce_means_maxima_and_negated_minima():
    # rank 1 reports twice rank 0's values: means are 1.5x, maxima are rank 1's; a minimum sent negated ("-" key)
    # comes back as the smaller (rank 0's) value with the "-" dropped
    ranks = RankGroup(_TwoRanks(lambda t: 2 * t))
    out = ranks.reduce({"a": 2.0, "b": 4.0}, {"len/max": torch.tensor(3.0), "-len/min": torch.tensor(-1.0)})
    assert out == {"a": 3.0, "b": 6.0, "len/max": 6.0, "len/min": 1.0}


def test_sum_and_min_int():
    assert RankGroup(_TwoRanks(lambda t: t + 3)).sum(2.0) == 7.0  # 2 + 5
    # rank 1 holds 8 (it doubles what it is sent, and -4 arrives as -8): the minimum is rank 0's 4, not 8
    assert RankGroup(_TwoRanks(lambda t: 2 * t)).min_int(4) == 4
