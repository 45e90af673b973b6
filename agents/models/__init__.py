from agents.models.agent import (
    CONTEXT_FILE_NAMES,
    MAX_CONTEXT_FILE_CHARS,
    Agent,
    AgentFile,
    AgentRole,
    AgentType,
    BusyPolicy,
    InputGuardMode,
)
from agents.models.providers import LLMProvider, ModelProfile, ProviderKind
from agents.models.revisions import AgentRevision

__all__ = [
    "CONTEXT_FILE_NAMES",
    "MAX_CONTEXT_FILE_CHARS",
    "Agent",
    "AgentFile",
    "AgentRevision",
    "AgentRole",
    "AgentType",
    "BusyPolicy",
    "InputGuardMode",
    "LLMProvider",
    "ModelProfile",
    "ProviderKind",
]
