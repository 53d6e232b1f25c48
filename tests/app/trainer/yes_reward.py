"""Reward for the dynamic-sampling tests: 1 when the response says "yes", else 0."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if "yes" in solution_str else 0.0
