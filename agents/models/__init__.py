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
from agents.models.conversation import (
    Checkpoint,
    Message,
    MessageState,
    Session,
    Thread,
    ThreadState,
    ToolCallMark,
    Turn,
    TurnState,
)
from agents.models.providers import LLMProvider, ModelProfile, ProviderKind
from agents.models.revisions import AgentRevision
from agents.models.usage import UsagePurpose, UsageRecord

__all__ = [
    "CONTEXT_FILE_NAMES",
    "MAX_CONTEXT_FILE_CHARS",
    "Agent",
    "AgentFile",
    "AgentRevision",
    "AgentRole",
    "AgentType",
    "BusyPolicy",
    "Checkpoint",
    "InputGuardMode",
    "LLMProvider",
    "Message",
    "MessageState",
    "ModelProfile",
    "ProviderKind",
    "Session",
    "Thread",
    "ThreadState",
    "ToolCallMark",
    "Turn",
    "TurnState",
    "UsagePurpose",
    "UsageRecord",
]
