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
from agents.models.memory import MemoryCategory, MemoryEntry, MemoryScope
from agents.models.memory_log import MemoryInjection
from agents.models.providers import LLMProvider, ModelProfile, ProviderKind
from agents.models.revisions import AgentRevision
from agents.models.routines import Routine, RoutineRun, RoutineStatus, TriggerKind
from agents.models.runs import (
    ACTIVE_RUN_STATUSES,
    FINISHED_RUN_STATUSES,
    ApprovalRequest,
    ApprovalStatus,
    Run,
    RunEvent,
    RunStatus,
)
from agents.models.usage import UsagePurpose, UsageRecord

__all__ = [
    "ACTIVE_RUN_STATUSES",
    "CONTEXT_FILE_NAMES",
    "FINISHED_RUN_STATUSES",
    "MAX_CONTEXT_FILE_CHARS",
    "Agent",
    "AgentFile",
    "AgentRevision",
    "AgentRole",
    "AgentType",
    "ApprovalRequest",
    "ApprovalStatus",
    "BusyPolicy",
    "Checkpoint",
    "InputGuardMode",
    "LLMProvider",
    "MemoryCategory",
    "MemoryEntry",
    "MemoryInjection",
    "MemoryScope",
    "Message",
    "MessageState",
    "ModelProfile",
    "ProviderKind",
    "Routine",
    "RoutineRun",
    "RoutineStatus",
    "Run",
    "RunEvent",
    "RunStatus",
    "Session",
    "Thread",
    "ThreadState",
    "ToolCallMark",
    "TriggerKind",
    "Turn",
    "TurnState",
    "UsagePurpose",
    "UsageRecord",
]
