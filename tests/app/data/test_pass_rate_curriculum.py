"""The quickstart's curriculum (app/data/pass_rate_curriculum.py): prompts drawn with weight p(1 - p) from their
group's decayed share of right samples, each prompt once an epoch, resumable from its state."""

import numpy as np
import torch
from omegaconf import OmegaConf

from app.data.custom_sampler import CustomBatchSampler, SamplerBatch
from app.data.pass_rate_curriculum import PassRateCurriculum


def _curriculum(levels, seed=1, **options):
    rows = [{"extra_info": {"level": level}} for level in levels]
    config = OmegaConf.create({"seed": seed, "sampler": {"group_key": "extra_info.level", **options}})
    return PassRateCurriculum(rows, config)


def _trained(indices, scores):
    token_scores = torch.zeros(len(scores), 3)
    token_scores[:, -1] = torch.tensor(scores)
    return SamplerBatch({"token_level_scores": token_scores}, {"dataset_index": np.asarray(indices)})


def test_prompts_come_from_the_groups_solved_about_half_the_time():
    levels = [1] * 50 + [2] * 50
    sampler = _curriculum(levels)
    # level 1: 32 samples, all right; level 2: 32 samples, half right (a 0.5 score is not right: right_score 1.0)
    sampler.update(_trained([0] * 32 + [50] * 32, [1.0] * 32 + [1.0, 0.5] * 16))
    # the prior adds one right and one wrong sample: 33/34 and 17/34
    assert sampler.pass_rates().tolist() == [33 / 34, 17 / 34]
    # weights p(1-p) + 0.01: 0.0386 for each level-1 prompt, 0.2599 for each level-2 one, so level 2 holds 87% of the
    # first draw (50 prompts each) and about as much of the later ones
    drawn = [index for _, index in zip(range(40), iter(sampler))]
    from_level_2 = sum(levels[i] == 2 for i in drawn)
    assert 30 <= from_level_2 <= 39 and len(set(drawn)) == 40  # uniform groups would give about 20
    sampler.update(_trained([60] * 8, [0.0] * 8))  # decayed by 0.9, then 8 wrong level-2 samples
    assert sampler.pass_rates()[1] == (0.9 * 16 + 1) / (0.9 * 32 + 8 + 2)


def test_each_prompt_is_drawn_once_an_epoch_and_a_resumed_sampler_continues_where_it_stopped():
    levels = [1, 2, 3] * 7

    def run(batches, sampler):
        out = []
        for _ in range(batches):
            _, _, indices = sampler.draw()
            out.append(indices)
            sampler.update(_trained(indices, [1.0 if levels[i] == 1 else 0.0 for i in indices]))
        return out

    def fresh():
        return CustomBatchSampler(
            _curriculum(levels, seed=3), len(levels), 4, "pkg://app.data.pass_rate_curriculum:PassRateCurriculum"
        )

    reference = run(12, fresh())  # five batches an epoch (21 prompts, the last one dropped)
    assert sorted(i for batch in reference[:5] for i in batch) == sorted(
        set(i for batch in reference[:5] for i in batch)
    )
    first = fresh()
    before = run(7, first)
    resumed = fresh()
    resumed.load_state_dict(first.state_dict())
    assert before + run(5, resumed) == reference


def test_a_right_score_of_half_counts_a_right_unmarked_number_as_right():
    # the quickstart's setting: the arithmetic reward gives 0.5 to a right number without its "#### N" line
    sampler = _curriculum([1] * 10, right_score=0.5)
    sampler.update(_trained([0] * 4, [1.0, 0.5, 0.1, 0.0]))  # marked right, unmarked right, marked wrong, nothing
    assert sampler.pass_rates().tolist() == [(2 + 1) / (4 + 2)]
