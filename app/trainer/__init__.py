"""The RL loop on Ray Train: rollout → reward → log-probs → advantages → update → sync → validate → checkpoint."""
