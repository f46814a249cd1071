"""Errors as typed exceptions, each carrying its ``AB-`` code with the catalogue's cause and fix.

``catalogue.json`` beside this module is generated from the Rust catalogue
(``crates/agentbus-protocol/src/errors.rs``); a Rust test fails when it is not current.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping, Optional


@lru_cache(maxsize=1)
def catalogue() -> dict[str, dict[str, Any]]:
    """Every catalogue entry by code (``AB-1011`` → ``{title, cause, fix, kind, …}``)."""
    text = resources.files(__package__).joinpath("catalogue.json").read_text(encoding="utf-8")
    return {e["code"]: e for e in json.loads(text)["codes"]}


class AgentBusError(Exception):
    """A failure with an ``AB-`` code: ``code``, ``message``, ``cause``, ``fix``, ``doc_url``."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        doc_url: Optional[str] = None,
        gateway: Optional[str] = None,
        http_status: Optional[int] = None,
        request_id: Optional[str] = None,
        details: Optional[Mapping[str, Any]] = None,
        retry_after: Optional[float] = None,
        fix: Optional[str] = None,
    ) -> None:
        entry = catalogue().get(code, {})
        self.code = code
        self.message = message
        self.title: str = entry.get("title", "")
        self.kind: str = entry.get("kind", "internal")
        self.cause: str = entry.get("cause", "")
        # The catalogue's fix, unless the case at hand has a more precise one (a command to run).
        self.fix: str = fix or entry.get("fix", "")
        path = entry.get("doc_path", f"/errors/{code}")
        self.doc_url: str = doc_url or (f"{gateway.rstrip('/')}{path}" if gateway else path)
        self.http_status = http_status
        self.request_id = request_id
        self.details: Mapping[str, Any] = details or {}
        self.retry_after = retry_after
        super().__init__(f"{code}: {message}")

    def __str__(self) -> str:
        text = f"{self.code}: {self.message}"
        if self.fix:
            text += f"\nfix: {self.fix}"
        return text + f"\nsee: {self.doc_url}"

    @property
    def retryable(self) -> bool:
        """Whether trying again later may succeed (the catalogue's ``unavailable`` kind, rates)."""
        return self.kind == "unavailable" or self.code in ("AB-5001", "AB-5002", "AB-4040")


class RefusedError(AgentBusError):
    """The gateway (or a peer's check) refused the request."""


class UnavailableError(AgentBusError):
    """The gateway could not serve now; retrying may help."""


class InputError(AgentBusError):
    """An input (a file, an id, a value) cannot be used."""


class ConfigurationError(AgentBusError):
    """Configuration or this machine's state is missing or wrong."""


class KeychainProfileError(InputError):
    """AB-1031 from :meth:`agentbus.Agent.from_profile`: the CLI profile keeps its key in the OS
    keychain, which this library does not read. ``fix`` is the command that gives the same agent
    a profile with a key file (``command``, profile ``file_profile``)."""

    def __init__(self, message: str, *, profile: str, file_profile: str, command: str, **kw: Any) -> None:
        self.profile = profile
        self.file_profile = file_profile
        self.command = command
        fix = (f"give this agent a second key in a 0600 file under a profile of its own: {command} "
               f"(the agent credential is the profile's \"token\"), then connect with "
               f"profile={file_profile!r}")
        super().__init__("AB-1031", message, fix=fix, **kw)


class SidecarTooOldError(RefusedError):
    """AB-6002: this library is older than the gateway's ``min_sidecar_version`` (§11.4)."""

    @property
    def upgrade_hint(self) -> str:
        return (
            "upgrade the agentbus library (pip install -U agentbus) to at least the "
            "min_sidecar_version in the gateway's /.well-known/agentbus.json"
        )

    def __str__(self) -> str:
        return super().__str__() + f"\nupgrade: {self.upgrade_hint}"


_BY_KIND: dict[str, type[AgentBusError]] = {
    "refused": RefusedError,
    "unavailable": UnavailableError,
    "input": InputError,
    "usage": InputError,
    "configuration": ConfigurationError,
}


def error_for(code: str, message: str, **kw: Any) -> AgentBusError:
    """The exception class of ``code``'s kind, built with its catalogue entry."""
    if code == "AB-6002":
        return SidecarTooOldError(code, message, **kw)
    kind = catalogue().get(code, {}).get("kind", "internal")
    return _BY_KIND.get(kind, AgentBusError)(code, message, **kw)
