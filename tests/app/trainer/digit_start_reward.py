"""A reward SmolLM2 learns in a few steps, for the learning test (verl's custom reward signature).

Asked an arithmetic word problem, SmolLM2-135M-Instruct opens with "Step 1", "To solve", "Let's" ... and with a
number about a fifth of the time: rewarding a digit as the first character is a clear, quickly learnable signal.
"""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if solution_str.lstrip()[:1].isdigit() else 0.0
