"""The trainer side: config, data, engines, roles, the RL loop and the `python -m app.<verb>` entry points."""
