"""Multi-turn, tool-using rollouts (verl's `actor_rollout_ref.rollout.multi_turn.*`): tools, their config file, the
tool-call parser, the tool runner, trajectories with a response mask, and the agent loop that drives the rollout
client one turn at a time. Nothing here imports Ray; the rollout client is passed in."""
