"""Training roles over the engine interface: actor, reference, critic."""

from app.roles.actor import Actor
from app.roles.critic import Critic
from app.roles.reference import Reference

__all__ = ["Actor", "Critic", "Reference"]
