"""The training reward of bench/learn_gsm8k.py (the evaluation stays the plain strict / flexible rules).

GSM8K's strict rule alone gives SmolLM2-135M almost no signal: untrained, about 1 sample in 100 is right and almost
none writes `#### <answer>`, so nearly every group of samples scores alike. GSM8K rows get
algos/rewards/gsm8k_steps.py: 1 for a right `#### N` answer; otherwise 0.2 for a well-formed one (some computed work,
then a last line `#### N`) plus up to 0.5 for the reference solution's intermediate results that the response computes
(`= 24` where the reference has `<<48/2=24>>`). At 0.1 the format was not learned in 35 steps under the bench's KL loss
(README: learning on GSM8K). Rows of the built-in arithmetic task mixed in (`--arithmetic`) keep
their own rule (`algos/rewards/arithmetic.py`).
"""

from algos.rewards import default_compute_score
from algos.rewards.gsm8k_steps import compute_score as gsm8k_step_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None, format_score=0.2, step_score=0.5):
    if data_source == "arithmetic":
        return default_compute_score(data_source, solution_str, ground_truth, extra_info)
    return gsm8k_step_score(solution_str, ground_truth, extra_info, format_score=format_score, step_score=step_score)
