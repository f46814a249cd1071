"""The async client: connect, send and reply, delegate, receive (§8), with retries.

Every request carries the bearer credential and ``agentbus-sidecar-version`` (§11.4), so a gateway
that needs a newer client answers AB-6002, raised as :class:`SidecarTooOldError`. Requests that
fail with a retryable code (429, 503, a lost connection) are retried with exponential backoff,
honouring ``Retry-After``; a publish is retried with the same signed envelope, hence the same id,
which the gateway answers as an idempotent replay (§8) rather than a second message.
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import hashlib
import json
import mimetypes
import os
import pathlib
import random
import time
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Mapping, Optional, Sequence, Union, cast,
)

import httpx
import websockets

from . import blobseal
from . import envelope as env_mod
from . import ids
from . import validate as validate_mod
from .envelope import Envelope, SigningKey
from .errors import AgentBusError, KeychainProfileError, error_for
from .frame import frame_envelope

if TYPE_CHECKING:
    from .worker import Worker

__all__ = ["Agent", "Message", "Task", "SendResult", "VERSION"]

VERSION = "0.1.0"
SIDECAR_VERSION_HEADER = "agentbus-sidecar-version"
TERMINAL_STATES = ("succeeded", "failed", "rejected", "expired", "cancelled")

PathLike = Union[str, "os.PathLike[str]"]


def _home(home: Optional[PathLike]) -> pathlib.Path:
    if home is not None:
        return pathlib.Path(home)
    env = os.environ.get("AGENTBUS_HOME")
    return pathlib.Path(env) if env else pathlib.Path.home() / ".agentbus"


@dataclass
class SendResult:
    """What a publish answered: the receipt, and the envelope as sent."""

    id: str
    receipt: Mapping[str, Any]
    envelope: Envelope
    replay: bool = False
    reply: Optional["Message"] = None

    @property
    def task_id(self) -> Optional[str]:
        v = self.receipt.get("task_id")
        return v if isinstance(v, str) else None


@dataclass
class Message:
    """One delivered copy (§8): the envelope, whether its signature verified, and its lease."""

    envelope: Envelope
    sequence: int
    delivery: str
    attempt: int
    verified: bool
    why_unverified: Optional[str] = None
    violations: tuple["validate_mod.Violation", ...] = ()
    task_id: Optional[str] = None
    _agent: Optional["Agent"] = field(default=None, repr=False)
    _acked: bool = field(default=False, repr=False)

    @property
    def id(self) -> str:
        return str(self.envelope.get("id", ""))

    @property
    def type(self) -> str:
        return str(self.envelope.get("type", ""))

    @property
    def source(self) -> str:
        return str(self.envelope.get("source", ""))

    @property
    def data(self) -> Mapping[str, Any]:
        d = self.envelope.get("data")
        return d if isinstance(d, dict) else {}

    @property
    def text(self) -> str:
        t = self.data.get("text")
        return t if isinstance(t, str) else ""

    @property
    def subject(self) -> Optional[str]:
        s = self.envelope.get("subject")
        return s if isinstance(s, str) else None

    def frame(self, *, profile: Optional[str] = None, late: bool = False) -> str:
        """The §13.1 frame of this message, for a model's context."""
        return frame_envelope(
            self.envelope,
            verified="true" if self.verified else "false",
            request_task=self.task_id,
            profile=profile,
            late=late,
        )

    async def ack(self) -> None:
        if self._agent is not None and not self._acked:
            await self._agent.ack(self)
            self._acked = True


class Task:
    """A delegated task: wait for its end, follow its progress, answer its questions, cancel it."""

    def __init__(self, agent: "Agent", request: SendResult, worker: str) -> None:
        self.agent = agent
        self.request = request
        self.worker = worker
        if request.task_id is None:
            raise error_for("AB-4015", "the gateway's receipt named no task")
        self.id: str = request.task_id

    async def state(self) -> Mapping[str, Any]:
        """``GET /v1/tasks/{id}``: state, timeline, deadlines."""
        return await self.agent._json("GET", f"/v1/tasks/{self.id}")

    async def progress(self, poll_s: float = 0.5) -> AsyncIterator[Mapping[str, Any]]:
        """Each timeline entry as it is recorded, until the task ends."""
        seen = 0
        while True:
            view = await self.state()
            timeline = view.get("timeline") or []
            for event in timeline[seen:]:
                yield event
            seen = len(timeline)
            if view.get("state") in TERMINAL_STATES:
                return
            await asyncio.sleep(poll_s)

    async def wait(self, timeout: Optional[float] = None, poll_s: float = 0.3) -> Mapping[str, Any]:
        """Waits for the task to end; returns the final ``task.result`` data (or the last state)."""

        async def run() -> Mapping[str, Any]:
            while True:
                view = await self.state()
                if view.get("state") in TERMINAL_STATES:
                    return await self._final(view)
                await asyncio.sleep(poll_s)

        return await asyncio.wait_for(run(), timeout)

    async def _final(self, view: Mapping[str, Any]) -> Mapping[str, Any]:
        conv = self.request.envelope["conversation_id"]
        doc = await self.agent._json("GET", f"/v1/conversations/{conv}")
        for e in reversed(doc.get("envelopes") or doc.get("messages") or []):
            env = e.get("envelope", e) if isinstance(e, dict) else {}
            data = env.get("data") if isinstance(env, dict) else None
            if (
                isinstance(data, dict)
                and data.get("task_id") == self.id
                and env.get("type") in ("agentbus.task.result.v1", "agentbus.task.error.v1")
            ):
                return {"state": view.get("state"), **data}
        return {"state": view.get("state"), "task_id": self.id}

    async def answer(self, text: str) -> SendResult:
        """Answers the worker's question (``task.input``)."""
        return await self.agent._send_kind(
            "agentbus.task.input.v1",
            self.worker,
            {"task_id": self.id, "answer": text},
            answering=self.request.envelope,
        )

    async def cancel(self, reason: Optional[str] = None) -> SendResult:
        data: dict[str, Any] = {"task_id": self.id}
        if reason is not None:
            data["reason"] = reason
        return await self.agent._send_kind(
            "agentbus.task.cancel.v1", self.worker, data, answering=self.request.envelope
        )


class Agent:
    """An agent connected to a gateway (async). See :class:`agentbus.sync.Agent` for the sync twin."""

    def __init__(
        self,
        gateway: str,
        credential: str,
        key: SigningKey,
        key_id: str,
        address: str,
        agent_id: Optional[str] = None,
        *,
        profile: Optional[str] = None,
        require_verified: Optional[bool] = None,
        max_retries: int = 5,
        version: str = VERSION,
        sleep: Optional[Callable[[float], Awaitable[Any]]] = None,
        clock: Optional[Callable[[], float]] = None,
    ) -> None:
        self.gateway = gateway.rstrip("/")
        self.credential = credential
        self.key = key
        self.key_id = key_id
        self.address = address
        self.agent_id = agent_id
        self.profile = profile
        self.max_retries = max_retries
        self.version = version
        self._require_verified = require_verified
        # Injectable for tests: how retries wait, and the wall clock (Unix seconds) an HTTP-date
        # Retry-After is measured against.
        self._sleep: Callable[[float], Awaitable[Any]] = sleep or asyncio.sleep
        self._clock: Callable[[], float] = clock or time.time
        self._http = httpx.AsyncClient(
            base_url=self.gateway,
            headers={
                "authorization": f"Bearer {credential}",
                SIDECAR_VERSION_HEADER: version,
                "user-agent": f"agentbus-python/{version}",
            },
            timeout=httpx.Timeout(75.0, connect=10.0),
        )
        self._keys: dict[str, tuple[str, str]] = {}  # key id -> (owner address, public key)
        self._cursor = 0
        self._seen: dict[str, None] = {}  # ids already handed over, oldest first
        self._stash: list[Message] = []
        self._pending: list[Mapping[str, Any]] = []  # a long-poll page's deliveries not yet read
        # What the last receive loop reads: "websocket", or "long-poll" when asked for or when
        # the socket's handshake was refused.
        self.inbox_transport: Optional[str] = None

    # ---- connecting ---------------------------------------------------------------------------

    @classmethod
    async def register(
        cls,
        gateway: str,
        token: str,
        name: str,
        *,
        card: Optional[Mapping[str, Any]] = None,
        save_profile: bool = False,
        home: Optional[PathLike] = None,
        **kw: Any,
    ) -> "Agent":
        """Registers a new agent with a user token and a fresh key, as ``agentbus connect`` does;
        with ``save_profile`` the profile and key file are written where the CLI keeps them."""
        key = SigningKey.generate()
        body = {"name": name, "public_key": key.public_key, **(card or {})}
        async with httpx.AsyncClient(base_url=gateway.rstrip("/"), timeout=30.0) as http:
            doc = await _call(
                http,
                "POST",
                "/v1/agents",
                json_body=body,
                headers={"authorization": f"Bearer {token}", SIDECAR_VERSION_HEADER: VERSION},
                gateway=gateway,
                retries=kw.get("max_retries", 5),
                sleep=kw.get("sleep") or asyncio.sleep,
                clock=kw.get("clock") or time.time,
            )
        card_doc = doc["agent"]
        agent = cls(
            gateway,
            doc["token"],
            key,
            doc["key"]["id"],
            card_doc["address"],
            card_doc["id"],
            profile=name if save_profile else None,
            **kw,
        )
        if save_profile:
            agent.save_profile(name, home)
        return agent

    @classmethod
    def from_profile(
        cls, name: Optional[str] = None, *, home: Optional[PathLike] = None, **kw: Any
    ) -> "Agent":
        """Loads a profile the CLI saved under ``$AGENTBUS_HOME`` (file key store)."""
        root = _home(home)
        pdir = root / "profiles"
        if name is None:
            names = sorted(p.stem for p in pdir.glob("*.json")) if pdir.is_dir() else []
            if len(names) != 1:
                raise error_for(
                    "AB-1040" if not names else "AB-1041",
                    f"name a profile: {', '.join(names) or 'none saved'} under {pdir}",
                )
            name = names[0]
        try:
            p = json.loads((pdir / f"{name}.json").read_text())
        except FileNotFoundError:
            raise error_for("AB-1040", f"no profile {name!r} under {pdir}") from None
        if p.get("key_store", "file") != "file":
            # The keychain is left to the CLI: reading it here would add a dependency with
            # per-OS backends (and a D-Bus Secret Service on Linux) that no test here can reach.
            file_profile = f"{name}-file"
            command = (
                f"AGENTBUS_KEYSTORE=file agentbus connect --gateway {p.get('gateway')} "
                f"--token <agent credential> --agent {p.get('agent_id')} --name {name} "
                f"--profile {file_profile}"
            )
            raise KeychainProfileError(
                f"profile {name!r} keeps its key in the OS keychain (service agentbus, account "
                f"{p.get('agent_id')}); this library reads key files only",
                profile=name, file_profile=file_profile, command=command,
            )
        key_file = root / "keys" / f"{p['agent_id']}.key"
        key = SigningKey.from_key_file(key_file.read_text())
        return cls(
            p["gateway"], p["token"], key, p["key_id"], p["address"], p["agent_id"],
            profile=name, **kw,
        )

    @classmethod
    async def connect(
        cls,
        gateway: Optional[str] = None,
        *,
        token: Optional[str] = None,
        name: Optional[str] = None,
        profile: Optional[str] = None,
        home: Optional[PathLike] = None,
        credential: Optional[str] = None,
        key: Optional[SigningKey] = None,
        key_id: Optional[str] = None,
        address: Optional[str] = None,
        agent_id: Optional[str] = None,
        card: Optional[Mapping[str, Any]] = None,
        save_profile: bool = False,
        **kw: Any,
    ) -> "Agent":
        """One entry point for the three ways in: a user ``token`` and ``name`` register a new
        agent; ``credential``, ``key``, ``key_id`` and ``address`` are taken as given; otherwise
        the CLI profile ``profile`` (or the only one) is loaded."""
        if token is not None and name is not None:
            if gateway is None:
                raise error_for("AB-3060", "registering needs the gateway's URL")
            return await cls.register(
                gateway, token, name, card=card, save_profile=save_profile, home=home, **kw
            )
        if credential is not None:
            if gateway is None or key is None or key_id is None or address is None:
                raise error_for(
                    "AB-3062", "an explicit connection needs gateway, credential, key, key_id and address"
                )
            return cls(gateway, credential, key, key_id, address, agent_id, **kw)
        agent = cls.from_profile(profile, home=home, **kw)
        if card:
            await agent.update_card(card)
        return agent

    def save_profile(self, name: str, home: Optional[PathLike] = None) -> pathlib.Path:
        """Writes the profile and key file in the CLI's layout (``agentbus --profile NAME`` uses them)."""
        root = _home(home)
        for d in (root, root / "profiles", root / "keys"):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        key_path = root / "keys" / f"{self.agent_id}.key"
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.key.to_key_file())
        doc = {
            "name": name, "gateway": self.gateway, "agent_id": self.agent_id,
            "address": self.address, "token": self.credential, "key_id": self.key_id,
            "key_store": "file",
        }
        path = root / "profiles" / f"{name}.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(doc, indent=2) + "\n")
        return path

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "Agent":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- HTTP ---------------------------------------------------------------------------------

    async def _json(self, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
        doc = await _call(
            self._http, method, path, json_body=body, gateway=self.gateway,
            retries=self.max_retries, sleep=self._sleep, clock=self._clock, **kw,
        )
        return cast("dict[str, Any]", doc)

    async def card(self) -> Mapping[str, Any]:
        return await self._json("GET", f"/v1/agents/{self.agent_id}")

    async def update_card(self, patch: Mapping[str, Any]) -> Mapping[str, Any]:
        """``PATCH /v1/agents/{id}``: capabilities (with input and output schemas), description…"""
        return await self._json("PATCH", f"/v1/agents/{self.agent_id}", dict(patch))

    async def directory(self) -> list[Mapping[str, Any]]:
        """The agents this one may see, with their cards."""
        return list((await self._json("GET", "/v1/agents")).get("agents", []))

    async def delivery(self, message_id: str) -> Mapping[str, Any]:
        """Each recipient's delivery state of a sent message (persisted … shown … answered)."""
        return await self._json("GET", f"/v1/messages/{message_id}/delivery")

    async def trace(self, conversation_id: str) -> Mapping[str, Any]:
        """The envelopes of a conversation this agent may read."""
        return await self._json("GET", f"/v1/conversations/{conversation_id}")

    async def well_known(self) -> Mapping[str, Any]:
        return await self._json("GET", "/.well-known/agentbus.json")

    # ---- sending ------------------------------------------------------------------------------

    async def publish(self, envelope: Envelope) -> SendResult:
        """Publishes a signed envelope; retries reuse it as it is, so its id stays the same."""
        doc, replay = await _call(
            self._http, "POST", "/v1/messages", json_body=envelope, gateway=self.gateway,
            retries=self.max_retries, with_replay=True, sleep=self._sleep, clock=self._clock,
        )
        return SendResult(id=doc["id"], receipt=doc, envelope=envelope, replay=replay)

    def seal(self, kind: str, to: str, data: Mapping[str, Any], **attrs: Any) -> Envelope:
        """Builds and signs an envelope from this agent, checked against §2 first: a broken rule
        raises its typed error (the gateway's code, every violation in ``details``) and nothing
        is sent."""
        env = env_mod.build(kind=kind, source=self.address, to=to, data=data, **attrs)
        env_mod.sign(env, self.key, self.key_id)
        validate_mod.check(env)
        return env

    async def _send_kind(
        self, kind: str, to: str, data: Mapping[str, Any], *,
        answering: Optional[Mapping[str, Any]] = None, **attrs: Any,
    ) -> SendResult:
        if answering is not None:
            attrs.setdefault("conversation_id", answering.get("conversation_id"))
            attrs.setdefault("correlation_id", answering.get("id"))
            attrs.setdefault("traceparent", ids.child_traceparent(answering.get("traceparent")))
        return await self.publish(self.seal(kind, to, data, **attrs))

    async def upload(self, path: PathLike) -> Mapping[str, Any]:
        """Uploads a file as a blob and returns the attachment object a message's
        ``data.attachments`` lists. ``POST /v1/blobs`` says where the bytes go (§9): the gateway
        (an inline ``PUT``), or an S3-compatible store (the content sealed here under the key the
        answer gives, a pre-signed ``PUT`` without the bearer token, then ``complete``)."""
        p = pathlib.Path(path)
        content = p.read_bytes()
        sha = hashlib.sha256(content).hexdigest()
        media = mimetypes.guess_type(p.name)[0] or "application/octet-stream"
        blob = await self._json(
            "POST", "/v1/blobs", {"name": p.name, "media_type": media, "size": len(content), "sha256": sha}
        )
        upload = blob.get("upload") or {}
        url = str(upload.get("url") or f"/v1/blobs/{blob['id']}/content")
        if url.startswith("/v1/"):
            await _call(
                self._http, "PUT", url, content=content,
                gateway=self.gateway, retries=self.max_retries, sleep=self._sleep, clock=self._clock,
            )
        else:
            sealed = blobseal.seal(blobseal.sealing_key(upload.get("sealing")), content)
            bound = {str(k).lower(): str(v) for k, v in (upload.get("headers") or {}).items()}
            if bound.get("content-length", str(len(sealed))) != str(len(sealed)):
                raise error_for(
                    "AB-3056",
                    f"the upload URL of {p.name!r} is signed for {bound['content-length']} bytes; "
                    f"the sealed content is {len(sealed)}",
                )
            headers = {k: v for k, v in bound.items() if k != "content-length"}
            try:
                async with httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0)) as store:
                    resp = await store.put(url, content=sealed, headers=headers)
            except httpx.TransportError as e:
                raise error_for("AB-4077", f"cannot reach the object store: {e}") from e
            if resp.status_code >= 300:
                raise error_for(
                    "AB-3056", f"the object store refused the upload of {p.name!r} with {resp.status_code}"
                )
            complete = (upload.get("complete") or {}).get("url") or f"/v1/blobs/{blob['id']}/complete"
            await self._json("POST", str(complete), {})
        return {"ref": blob["ref"], "name": p.name, "media_type": media, "size": len(content), "sha256": sha}

    async def download(
        self, attachment: Union[str, Mapping[str, Any]], to: Optional[PathLike] = None
    ) -> bytes:
        """The content of an attachment (its object from ``data.attachments``, or its
        ``blob://…`` ref), from wherever ``GET /v1/blobs/{id}`` says: the gateway, or a
        pre-signed GET of the sealed object whose pieces are opened here. Size and sha256 are
        checked against the blob (and the attachment's own, when given) before anything is
        returned; with ``to`` the bytes are also written there, the file appearing only whole."""
        ref = attachment if isinstance(attachment, str) else str(attachment.get("ref", ""))
        blob_id = ref.rsplit("/", 1)[-1]
        if not validate_mod.is_id(blob_id, "blb_"):
            raise error_for("AB-4008", f"{ref!r} is not a blob:// reference")
        meta = await self._json("GET", f"/v1/blobs/{blob_id}")
        nested = meta.get("blob")
        info: Mapping[str, Any] = nested if isinstance(nested, dict) else meta
        size, sha = int(info["size"]), str(info["sha256"])
        target = meta.get("download") or {}
        url = str(target.get("url") or f"/v1/blobs/{blob_id}/content")
        if url.startswith("/v1/"):
            resp = await self._http.get(url)
            if resp.status_code >= 400:
                raise _error_from(resp, self.gateway, None)
            content = resp.content
        else:
            try:
                async with httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0)) as store:
                    resp = await store.get(url)
            except httpx.TransportError as e:
                raise error_for("AB-4077", f"cannot reach the object store: {e}") from e
            if resp.status_code >= 300:
                raise error_for("AB-4008", f"the object store answered {resp.status_code} for blob {blob_id}")
            content = blobseal.open_(blobseal.sealing_key(target.get("sealing")), resp.content, size)
        got = hashlib.sha256(content).hexdigest()
        declared = attachment if isinstance(attachment, Mapping) else {}
        if len(content) != size or got != sha or declared.get("sha256", sha) != sha or int(
            declared.get("size", size)
        ) != size:
            raise error_for(
                "AB-3020",
                f"blob {blob_id} arrived as {len(content)} bytes with sha256 {got}; it is {size} bytes "
                f"with {sha}" + (f", the attachment says {declared.get('size')} bytes with "
                                 f"{declared.get('sha256')}" if declared else ""),
            )
        if to is not None:
            dest = pathlib.Path(to)
            part = dest.with_name(dest.name + ".part")
            part.write_bytes(content)
            os.replace(part, dest)
        return content

    async def send(
        self,
        to: str,
        text: str,
        *,
        subject: Optional[str] = None,
        expects_reply: Optional[bool] = None,
        priority: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        attachments: Sequence[PathLike] = (),
        conversation_id: Optional[str] = None,
        reply_to: Optional[Union[Message, Mapping[str, Any]]] = None,
        wait_reply: Optional[float] = None,
        fmt: Optional[str] = None,
    ) -> SendResult:
        """Sends an ``agentbus.message.v1``; with ``wait_reply`` (seconds) waits for the answer,
        returned as ``result.reply``."""
        data: dict[str, Any] = {"text": text}
        if expects_reply is not None or wait_reply is not None:
            data["expects_reply"] = bool(expects_reply if expects_reply is not None else True)
        if fmt is not None:
            data["format"] = fmt
        if attachments:
            data["attachments"] = [await self.upload(a) for a in attachments]
        original = reply_to.envelope if isinstance(reply_to, Message) else reply_to
        attrs: dict[str, Any] = {
            "subject": subject, "priority": priority, "idempotency_key": idempotency_key,
        }
        if conversation_id is not None:
            attrs["conversation_id"] = conversation_id
        result = await self._send_kind(
            "agentbus.message.v1", to, data, answering=original,
            **{k: v for k, v in attrs.items() if v is not None},
        )
        if wait_reply is not None:
            result.reply = await self.wait_reply(result.id, timeout=wait_reply)
        return result

    async def reply(self, message: Union[Message, Mapping[str, Any]], text: str, **kw: Any) -> SendResult:
        """Answers a message: same conversation and trace, ``correlation_id`` its id (§7)."""
        original = message.envelope if isinstance(message, Message) else message
        return await self.send(str(original["source"]), text, reply_to=original, **kw)

    async def wait_reply(self, message_id: str, timeout: float = 60.0) -> Message:
        """Receives until the answer to ``message_id`` arrives; other messages wait, unacked, for
        the next :meth:`messages` loop."""

        async def run() -> Message:
            async for m in self._stream(hand_stash=False):
                if m.envelope.get("correlation_id") == message_id:
                    await m.ack()
                    return m
                self._stash.append(m)
            raise error_for("AB-4077", "the inbox stream ended")

        return await asyncio.wait_for(run(), timeout)

    async def delegate(
        self,
        to: str,
        capability: str,
        version: str = "1",
        *,
        input: Optional[Mapping[str, Any]] = None,
        instructions: str = "",
        constraints: Optional[Mapping[str, Any]] = None,
        budget: Optional[Mapping[str, Any]] = None,
        attachments: Sequence[PathLike] = (),
        subject: Optional[str] = None,
        priority: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Task:
        """Sends a ``task.request`` and returns its :class:`Task`."""
        data: dict[str, Any] = {"instructions": instructions}
        if input is not None:
            data["input"] = dict(input)
        if constraints is not None:
            data["constraints"] = dict(constraints)
        if attachments:
            data["attachments"] = [await self.upload(a) for a in attachments]
        attrs: dict[str, Any] = {
            "subject": subject, "priority": priority, "idempotency_key": idempotency_key,
            "budget": budget,
        }
        result = await self._send_kind(
            "agentbus.task.request.v1", to, data, capability=(capability, version),
            **{k: v for k, v in attrs.items() if v is not None},
        )
        return Task(self, result, to)

    # ---- receiving ----------------------------------------------------------------------------

    async def require_verified(self) -> bool:
        """The workspace's ``require_verified_inbound`` (§13.1), unless set on this client."""
        if self._require_verified is None:
            try:
                policy = await self._json("GET", "/v1/inbox/policy")
                self._require_verified = bool(policy.get("require_verified_inbound"))
            except AgentBusError:
                # Unknown policy: hold unverified messages back, the safe side of §13.1.
                return True
        return bool(self._require_verified)

    async def _refresh_keys(self) -> None:
        for card in await self.directory():
            for k in card.get("keys") or []:
                self._keys[k["id"]] = (card["address"], k["public_key"])
        wk = await self.well_known()
        for k in wk.get("gateway_keys") or []:
            self._keys[k["id"]] = ("agent://system/gateway/*", k["public_key"])

    async def verify(self, envelope: Mapping[str, Any]) -> Optional[str]:
        """Re-verifies a delivered envelope against its sender's registered keys (§3.2); None when
        it verifies, else why not."""
        try:
            key_id, _ = env_mod.parse_sig(envelope.get("sig"))
        except ValueError as e:
            return f"the signature cannot be read: {e}"
        if key_id not in self._keys:
            await self._refresh_keys()
        known = self._keys.get(key_id)
        if known is None:
            return f"key {key_id} is not registered to any agent"
        owner, public = known
        source = str(envelope.get("source", ""))
        if not (source.startswith(owner[:-1]) if owner.endswith("*") else owner == source):
            return f"key {key_id} belongs to {owner}, not to the source {source}"
        return None if env_mod.verify(envelope, public) else "the signature does not verify"

    async def _task_of_request(self, envelope: Mapping[str, Any]) -> Optional[str]:
        if envelope.get("type") != "agentbus.task.request.v1":
            return None
        doc = await self._json("GET", f"/v1/tasks?recipient={self.agent_id}&limit=1000")
        for t in doc.get("tasks") or []:
            if t.get("request_id") == envelope.get("id"):
                return str(t["id"])
        return None

    async def _message(self, d: Mapping[str, Any]) -> Message:
        raw = d["envelope"]
        env = dict(raw)
        violations = self.check_envelope(raw)
        why: Optional[str] = None
        if violations:
            first = violations[0]
            why = f"the envelope breaks §2: {first.code} {first.path} {first.message}".replace("  ", " ")
        else:
            why = await self.verify(env)
        return Message(
            envelope=env, sequence=int(d["sequence"]), delivery=str(d["delivery"]),
            attempt=int(d.get("attempt", 1)), verified=why is None, why_unverified=why,
            violations=tuple(violations), task_id=await self._task_of_request(env), _agent=self,
        )

    @staticmethod
    def check_envelope(envelope: Any) -> list["validate_mod.Violation"]:
        """The §2 violations of a delivered envelope (as read by this client, so a repeated
        member name is still seen): an envelope the gateway should never have delivered is
        treated as unverified. An unregistered type is not one (§11.3: opaque to receivers)."""
        if not isinstance(envelope, dict):
            return [validate_mod.Violation("AB-3001", "", "an envelope is a JSON object")]
        problem = validate_mod.i_json_problem(envelope)
        if problem:
            return [validate_mod.Violation("AB-3001", "", problem)]
        return [v for v in validate_mod.validate(envelope) if v.code != "AB-3012"]

    async def ack(self, message: Message) -> None:
        """Acks a delivered copy: its id counts as handled, so a redelivery is skipped (§8)."""
        self._remember(message.id)
        try:
            await self._json(
                "POST", "/v1/inbox/acks", {"acks": [{"sequence": message.sequence, "delivery": message.delivery}]}
            )
        except AgentBusError as e:
            # AB-4010: the lease ran out and the copy was delivered again under a new token; that
            # copy arrives with the same id and is acked as a duplicate of this handled one (§8).
            if e.code != "AB-4010":
                raise

    def _ws_url(self) -> str:
        base = self.gateway.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
        return f"{base}/v1/inbox/ws?after={self._cursor}"

    async def _deliveries_ws(self) -> AsyncIterator[Mapping[str, Any]]:
        headers = {"authorization": f"Bearer {self.credential}", SIDECAR_VERSION_HEADER: self.version}
        async with websockets.connect(self._ws_url(), additional_headers=headers, max_size=2**21) as ws:
            async for raw in ws:
                frame = validate_mod.loads_marked(raw)
                if frame.get("type") == "delivery":
                    yield frame["delivery"]
                elif frame.get("type") == "error":
                    err = frame.get("error", {})
                    raise error_for(err.get("code", "AB-9003"), err.get("message", ""), gateway=self.gateway)

    async def _deliveries_poll(self, wait_s: int = 20) -> AsyncIterator[Mapping[str, Any]]:
        # A page is kept until each of its deliveries is handed over: a loop left after the
        # first ones finds the rest here next time, not only after their leases run out.
        if not self._pending:
            doc = await self._json("GET", f"/v1/inbox?after={self._cursor}&wait={wait_s}&limit=100")
            self._pending.extend(doc.get("deliveries") or [])
        while self._pending:
            yield self._pending.pop(0)

    async def _stream(self, *, hand_stash: bool = True, websocket: bool = True) -> AsyncIterator[Message]:
        """Deliveries as verified :class:`Message` objects, over the WebSocket, falling back to the
        long poll; reconnects resume after the last sequence; redeliveries of an id already handed
        over are acked and skipped (§8)."""
        use_ws = websocket
        self.inbox_transport = "websocket" if websocket else "long-poll"
        backoff = 0.2
        while True:
            while hand_stash and self._stash:
                yield self._stash.pop(0)
            try:
                from_page = bool(self._pending) or not use_ws
                source = self._deliveries_poll() if from_page else self._deliveries_ws()
                async for d in source:
                    backoff = 0.2
                    m = await self._message(d)
                    self._cursor = max(self._cursor, m.sequence)
                    if m.id in self._seen:
                        await m.ack()  # handled already: its earlier ack was lost
                        continue
                    held = [i for i, s in enumerate(self._stash) if s.id == m.id]
                    if held:
                        self._stash[held[0]] = m  # a newer lease of a message waiting here
                        continue
                    yield m
                if from_page:
                    continue  # the next long poll (or the socket) at once
            except (OSError, websockets.exceptions.WebSocketException, asyncio.TimeoutError) as e:
                if isinstance(e, websockets.exceptions.InvalidHandshake):
                    # Something answered HTTP but refused the upgrade: a gateway without the
                    # socket (404) or a proxy that strips WebSockets. The long poll serves.
                    use_ws = False
                    self.inbox_transport = "long-poll"
            except AgentBusError as e:
                if not e.retryable:
                    raise
            await asyncio.sleep(backoff + random.random() * backoff)
            backoff = min(backoff * 2, 5.0)

    def _remember(self, message_id: str) -> None:
        self._seen[message_id] = None
        while len(self._seen) > 10_000:
            self._seen.pop(next(iter(self._seen)))

    async def messages(self, *, websocket: bool = True) -> AsyncIterator[Message]:
        """Received messages, verified (``message.verified``), each acked once the loop body that
        took it is done (when the next is asked for): a crash in the body leaves it unacked, to
        be redelivered after its lease. A loop left with ``break`` leaves its last message
        unacked too; ``await message.ack()`` before leaving keeps it. Under
        ``require_verified_inbound`` an unverified copy is never yielded: it is acked and dropped."""
        async for m in self._stream(websocket=websocket):
            if not m.verified and await self.require_verified():
                await m.ack()
                continue
            yield m
            self._remember(m.id)
            await m.ack()

    async def listen(
        self,
        handler: Callable[[Message], Awaitable[Any]],
        *,
        stop: Optional[asyncio.Event] = None,
        websocket: bool = True,
    ) -> None:
        """Calls ``handler`` for each message, acking only after it returns."""
        async for m in self.messages(websocket=websocket):
            await handler(m)
            if stop is not None and stop.is_set():
                return

    # ---- working ------------------------------------------------------------------------------

    def worker(self) -> "Worker":
        from .worker import Worker

        return Worker(self)


async def _call(
    http: httpx.AsyncClient,
    method: str,
    path: str,
    *,
    json_body: Any = None,
    content: Optional[bytes] = None,
    headers: Optional[Mapping[str, str]] = None,
    gateway: str = "",
    retries: int = 5,
    with_replay: bool = False,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    clock: Callable[[], float] = time.time,
) -> Any:
    """One API call with retries: 429 and 5xx answers and lost connections are tried again after
    ``Retry-After`` (or an exponential backoff with jitter); other refusals raise at once."""
    attempt = 0
    while True:
        try:
            if content is not None:
                resp = await http.request(method, path, content=content, headers=headers)
            elif json_body is not None:
                # Compact, as the 1 MiB limit (§2.3) is checked locally on this same form.
                body = json.dumps(json_body, ensure_ascii=False, separators=(",", ":")).encode()
                h = {"content-type": "application/json", **(headers or {})}
                resp = await http.request(method, path, content=body, headers=h)
            else:
                resp = await http.request(method, path, headers=headers)
        except (httpx.TransportError,) as e:
            if attempt >= retries:
                raise error_for("AB-4077", f"cannot reach the gateway: {e}", gateway=gateway) from e
            await sleep(_backoff(attempt, None))
            attempt += 1
            continue
        if resp.status_code < 400:
            # Read keeping repeated member names visible, so a delivered envelope is checked as
            # received (§2, I-JSON), not as a dict would leave it.
            doc = validate_mod.loads_marked(resp.content) if resp.content else {}
            if with_replay:
                return doc, resp.headers.get("agentbus-idempotent-replay") == "true"
            return doc
        retry_after = _retry_after(resp.headers.get("retry-after"), clock())
        err = _error_from(resp, gateway, retry_after)
        if (resp.status_code == 429 or resp.status_code >= 500) and attempt < retries:
            await sleep(_backoff(attempt, retry_after))
            attempt += 1
            continue
        raise err


def _retry_after(value: Optional[str], now: float) -> Optional[float]:
    """Seconds to wait from a ``Retry-After`` (RFC 9110 §10.2.3): delay-seconds, or an HTTP-date
    measured against ``now`` (Unix seconds; a date already past waits 0). None when absent or
    unreadable."""
    if value is None:
        return None
    value = value.strip()
    # delay-seconds is digits; a fraction is taken too (some servers send one), never inf or nan.
    if value and all(part.isascii() and part.isdigit() for part in value.split(".", 1)):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # the asctime form carries no zone; HTTP dates are UTC
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, when.timestamp() - now)


def _backoff(attempt: int, retry_after: Optional[float]) -> float:
    if retry_after is not None:
        return retry_after
    base = min(0.2 * 2.0**attempt, 10.0)
    return base / 2 + random.random() * base / 2


def _error_from(resp: httpx.Response, gateway: str, retry_after: Optional[float]) -> AgentBusError:
    try:
        err = resp.json().get("error", {})
    except (ValueError, AttributeError):
        err = {}
    code = err.get("code") or ("AB-9001" if resp.status_code >= 500 else "AB-4004")
    return error_for(
        code,
        err.get("message") or resp.reason_phrase,
        doc_url=err.get("doc_url"),
        gateway=gateway,
        http_status=resp.status_code,
        request_id=err.get("request_id"),
        details=err.get("details"),
        retry_after=retry_after,
    )
