"""Rule-based rewards, looked up by a sample's data_source.

Built in: ``openai/gsm8k``/``gsm8k`` (``#### N``), MATH-style ``\\boxed{}`` answers (``math``, ``lighteval/MATH``, ...),
DAPO's ``Answer:`` grading (``math_dapo`` and every ``aime*`` source), Search-R1's exact match (``searchR1_nq``, ...),
code run against test cases (``codecontests``, ``apps``, ``codeforces``, ``taco``),
the built-in ``arithmetic`` task and its tool-use form ``calculator_arithmetic``, and format-only rewards
(``format_hash``, ``format_boxed``).
Importing this package registers them. It imports no torch, so reward worker processes start fast;
``algos.rewards.token_level.scores_to_token_rewards`` (torch) is imported from its module.
"""

from algos.registry import load_callable
from algos.rewards import (  # noqa: F401  (registers the built-ins)
    arithmetic,
    code_tests,
    format_reward,
    gsm8k,
    math_answers,
    math_dapo,
    qa_exact_match,
    tool_arithmetic,
)
from algos.rewards.default import default_compute_score
from algos.rewards.registry import (
    UnknownDataSourceError,
    get_reward_fn,
    ground_truth_check,
    known_data_sources,
    register_reward,
    unregister_reward,
)

register_reward("format_hash", fn=format_reward._format_hash)
register_reward("format_boxed", fn=format_reward._format_boxed)

__all__ = [
    "UnknownDataSourceError",
    "default_compute_score",
    "get_reward_fn",
    "ground_truth_check",
    "known_data_sources",
    "load_callable",
    "register_reward",
    "unregister_reward",
]
