"""A light run (C2, action ``light``): a fresh session each time (no history), the
agent's cheap model when it has one (the session's model override) and the minimal
system prompt (identity, tooling, the context files a sub-agent gets: the runtime
reads the session's channel, :data:`LIGHT_CHANNEL`).

The firing of a light routine makes its session with
``agents.routines.sessions.new_sessions`` (:func:`light_session` for one)."""

from __future__ import annotations

from agents.models import Routine, Session

LIGHT_CHANNEL = "routine_light"
ROUTINE_CHANNELS = ("routine", LIGHT_CHANNEL)  # sessions routines made: never an event source


def light_session(routine: Routine) -> Session:
    """A new session for one light run of ``routine`` (on the agent's cheap model)."""
    from agents.routines.sessions import new_sessions

    (session,) = new_sessions([routine])
    return session


def prompt_mode_for(channel: str) -> str:
    """The system prompt's mode of a session's runs."""
    return "minimal" if channel == LIGHT_CHANNEL else "full"
