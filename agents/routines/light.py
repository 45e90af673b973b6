"""A light run (C2, action ``light``): a fresh session each time (no history), the
agent's cheap model when it has one (the session's model override) and the minimal
system prompt (identity, tooling, the context files a sub-agent gets: the runtime
reads the session's channel, :data:`LIGHT_CHANNEL`).

``agents.routines.firing._send`` makes the session of a light routine's run; it
calls :func:`light_session` for it."""

from __future__ import annotations

from agents.models import Routine, Session

LIGHT_CHANNEL = "routine_light"
ROUTINE_CHANNELS = ("routine", LIGHT_CHANNEL)  # sessions routines made: never an event source


def light_session(routine: Routine) -> Session:
    """A new session for one light run of ``routine``."""
    from agents.actions.conversation import do_create_session

    acting = routine.user if routine.user_id else None
    session = do_create_session(
        routine.agent, user=acting, channel=LIGHT_CHANNEL, title=f"Routine: {routine.name}"[:200]
    )
    cheap = routine.agent.cheap_model_id
    if cheap is not None:
        Session._base_manager.filter(pk=session.pk).update(model_override_id=cheap)
        session.model_override_id = cheap
    return session


def prompt_mode_for(channel: str) -> str:
    """The system prompt's mode of a session's runs."""
    return "minimal" if channel == LIGHT_CHANNEL else "full"
