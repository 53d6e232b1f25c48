"""Policy loss for the bad-step tests (`loss_mode=nan_policy_loss:loss`): verl's vanilla PPO loss, made NaN on the
training steps listed in `NAN_STEPS`.

The tests' runs take one mini-batch in one micro-batch per step, so the loss is called once a step and its call
count is the step number.
"""

from __future__ import annotations

from algos.policy_loss import vanilla

NAN_STEPS: set[int] = set()
calls = 0


def loss(old_log_prob, log_prob, advantages, response_mask, **kwargs):
    global calls
    calls += 1
    value, metrics = vanilla(old_log_prob, log_prob, advantages, response_mask, **kwargs)
    return (value * float("nan") if calls in NAN_STEPS else value), metrics
