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


class _RankOne(_TwoRanks):
    """Rank 0's view when rank 1 holds {"acc", "pred"}: its length for the max, its row of the gathered bytes."""

    def __init__(self):
        theirs = torch.tensor(list(b"acc\npred"), dtype=torch.float64)

        def other(t):
            if t.dim() == 1:  # the length round
                return torch.tensor([float(len(theirs))])
            row = torch.zeros_like(t)
            row[1, : len(theirs)] = theirs
            return row

        super().__init__(other)


def test_union_of_names_over_ranks():
    # rank 0 has {"acc", "formatted"}, rank 1 {"acc", "pred"} (shorter, so its row is zero-padded): every name once,
    # sorted
    assert RankGroup(_RankOne()).union({"formatted", "acc"}) == ["acc", "formatted", "pred"]
    assert RankGroup(_RankOne()).union(set()) == ["acc", "pred"]  # a rank with no validation records


def test_gather_text_keeps_rank_order_and_utf8():
    # rank 0's text is longer than rank 1's 8 bytes and not ASCII: each comes back whole, rank 0 first
    assert RankGroup(_RankOne()).gather_text("½ + ¼ = ¾ ok") == ["½ + ¼ = ¾ ok", "acc\npred"]


def test_sum_tensor_sums_elementwise_and_keeps_the_dtype():
    # rank 1 holds twice rank 0's values: each element is 3x rank 0's; float32 in, float32 out
    total = RankGroup(_TwoRanks(lambda t: 2 * t)).sum_tensor(torch.tensor([1.0, 2.5]))
    assert total.tolist() == [3.0, 7.5] and total.dtype == torch.float32
