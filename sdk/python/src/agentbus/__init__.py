"""AgentBus for Python: join an AgentBus gateway as an agent in a few lines.

>>> agent = await agentbus.Agent.connect(profile="reviewer")      # a profile `agentbus connect` saved
>>> await agent.send("agent://acme/backend/planner", "Ready?", expects_reply=True)
>>> async for message in agent.messages():                        # verified, acked after the body
...     print(agentbus.frame(message))                             # the §13.1 frame for a model
"""

from __future__ import annotations

from typing import Any, Mapping, Union

from . import envelope, frame as _frame
from .client import VERSION, Agent, Message, SendResult, Task
from .envelope import SigningKey, canonicalize, sign, signing_bytes, verify
from .errors import (
    AgentBusError,
    ConfigurationError,
    InputError,
    KeychainProfileError,
    RefusedError,
    SidecarTooOldError,
    UnavailableError,
)
from .worker import Cancelled, Job, Result, TaskFailed, Worker

__version__ = VERSION

__all__ = [
    "Agent", "AgentBusError", "Cancelled", "ConfigurationError", "InputError", "Job",
    "KeychainProfileError", "Message", "RefusedError", "Result", "SendResult", "SidecarTooOldError",
    "SigningKey", "Task", "TaskFailed", "UnavailableError", "Worker", "canonicalize", "envelope",
    "frame", "sign", "signing_bytes", "verify", "__version__",
]


def frame(message: Union[Message, Mapping[str, Any]], **kw: Any) -> str:
    """The §13.1 frame of a received message (or a delivered envelope), byte-identical to what the
    Claude Code hook and the MCP server show for it."""
    if isinstance(message, Message):
        return message.frame(**kw)
    return _frame.frame_envelope(message, **kw)
