"""The training reward of bench/learn_gsm8k.py (the evaluation stays the plain strict / flexible rules).

GSM8K's strict rule alone gives SmolLM2-135M almost no signal: it rarely writes `#### <answer>` at all (0.5% strict
at greedy). So a marked answer earns `format_score` even when wrong, and a correct marked answer earns 1: the policy
first learns the format the strict rule reads, then gets paid for being right. Unmarked answers earn nothing, even when
their last number is right, so the shortcut the flexible rule would allow is not rewarded.
"""
from algos.rewards.gsm8k import compute_score as gsm8k_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None, format_score=0.1):
    return gsm8k_score(solution_str, ground_truth, method="strict", format_score=format_score)
