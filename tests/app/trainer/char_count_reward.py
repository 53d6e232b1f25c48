"""Reward for tests that need every group's samples to score differently, even from a random tiny model: the number
of characters in the response, so GRPO advantages are non-zero and each update moves the policy."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return len(solution_str) / 100.0
