"""A worker: answers ``task.request`` messages for the capabilities on this agent's card (§6).

For each request of a served capability the worker sends ``task.accept``, runs the handler (a
plain or async function), heartbeats ``task.progress`` while it runs, lets it ask the requester a
question (``task.needs_input``, then the requester's ``task.input``), and ends with a
``task.result``: ``succeeded`` with the output (checked against the capability's
``output_schema`` and the request's ``constraints.output_schema``), ``failed`` when the handler
raises or its output does not fit, and ``failed`` with ``failure.code: "cancelled"`` when it
observed the requester's cancel.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import jsonschema

from .client import Agent, Message

REQUEST = "agentbus.task.request.v1"


class Cancelled(Exception):
    """The requester cancelled the task; raised by :meth:`Job.check_cancelled`."""


class TaskFailed(Exception):
    """Raise from a handler to fail the task with a code and message."""

    def __init__(self, message: str, code: str = "failed", retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable


@dataclass
class Result:
    """What a handler may return: an output object and a summary."""

    output: Optional[Mapping[str, Any]] = None
    summary: Optional[str] = None


@dataclass
class Capability:
    name: str
    version: str
    handler: Callable[..., Any]
    input_schema: Optional[Mapping[str, Any]] = None
    output_schema: Optional[Mapping[str, Any]] = None
    description: Optional[str] = None

    def card_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": self.name, "version": self.version}
        if self.description:
            entry["description"] = self.description
        if self.input_schema is not None:
            entry["input_schema"] = dict(self.input_schema)
        if self.output_schema is not None:
            entry["output_schema"] = dict(self.output_schema)
        return entry


class Job:
    """One task being worked: its request, and the verbs a handler uses."""

    def __init__(self, agent: Agent, request: Message, task_id: str) -> None:
        self.agent = agent
        self.request = request
        self.task_id = task_id
        self.cancelled = asyncio.Event()
        self._answers: asyncio.Queue[str] = asyncio.Queue()

    @property
    def input(self) -> Mapping[str, Any]:
        v = self.request.data.get("input")
        return v if isinstance(v, dict) else {}

    @property
    def instructions(self) -> str:
        v = self.request.data.get("instructions")
        return v if isinstance(v, str) else ""

    async def _send(self, kind: str, data: Mapping[str, Any]) -> None:
        await self.agent._send_kind(
            kind, self.request.source, {"task_id": self.task_id, **data}, answering=self.request.envelope
        )

    async def progress(
        self, percent: Optional[float] = None, note: Optional[str] = None, stage: Optional[str] = None
    ) -> None:
        data: dict[str, Any] = {}
        if percent is not None:
            data["percent"] = percent
        if note is not None:
            data["note"] = note
        if stage is not None:
            data["stage"] = stage
        await self._send("agentbus.task.progress.v1", data)

    async def ask(self, question: str, options: Sequence[str] = (), timeout: Optional[float] = None) -> str:
        """Asks the requester (``task.needs_input``) and returns its answer (``task.input``)."""
        data: dict[str, Any] = {"question": question}
        if options:
            data["options"] = list(options)
        await self._send("agentbus.task.needs_input.v1", data)
        return await asyncio.wait_for(self._answers.get(), timeout)

    async def error(self, code: str, message: str, recoverable: bool = True) -> None:
        """Reports a non-final error (``task.error``)."""
        await self._send("agentbus.task.error.v1", {"code": code, "message": message, "recoverable": recoverable})

    def check_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled(self.task_id)


class Worker:
    """Serves capabilities: ``worker.capability("code.review", "1", fn)`` then ``await worker.run()``."""

    def __init__(self, agent: Agent, heartbeat_s: float = 60.0) -> None:
        self.agent = agent
        self.heartbeat_s = heartbeat_s
        self.capabilities: dict[tuple[str, str], Capability] = {}
        self.jobs: dict[str, Job] = {}
        self.finished: list[tuple[str, str]] = []  # (task id, outcome), for tests and logs
        self._tasks: set[asyncio.Task[None]] = set()

    def capability(
        self,
        name: str,
        version: str = "1",
        handler: Optional[Callable[..., Any]] = None,
        *,
        input_schema: Optional[Mapping[str, Any]] = None,
        output_schema: Optional[Mapping[str, Any]] = None,
        description: Optional[str] = None,
    ) -> Any:
        """Registers a handler (also usable as a decorator). The handler takes the :class:`Job`,
        or the input object when it has one parameter named ``input``."""

        def add(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.capabilities[(name, version.split(".")[0])] = Capability(
                name, version, fn, input_schema, output_schema, description
            )
            return fn

        return add(handler) if handler is not None else add

    async def publish_card(self) -> None:
        """Declares the capabilities on the agent's card (what the gateway checks requests against)."""
        await self.agent.update_card({"capabilities": [c.card_entry() for c in self.capabilities.values()]})

    async def run(self, *, stop: Optional[asyncio.Event] = None, publish_card: bool = True) -> None:
        if publish_card:
            await self.publish_card()
        try:
            async for m in self.agent.messages():
                await self._dispatch(m)
                if stop is not None and stop.is_set():
                    return
        finally:
            for t in list(self._tasks):
                t.cancel()

    async def _dispatch(self, m: Message) -> None:
        if not m.verified:
            return  # never act on a request whose sender is not who it claims (§13.1)
        task_id = m.data.get("task_id")
        if m.type == "agentbus.task.cancel.v1" and isinstance(task_id, str) and task_id in self.jobs:
            self.jobs[task_id].cancelled.set()
            return
        if m.type == "agentbus.task.input.v1" and isinstance(task_id, str) and task_id in self.jobs:
            answer = m.data.get("answer")
            self.jobs[task_id]._answers.put_nowait(answer if isinstance(answer, str) else "")
            return
        if m.type != REQUEST or m.task_id is None or m.task_id in self.jobs:
            return
        cap_name = str(m.envelope.get("capability", ""))
        major = str(m.envelope.get("capability_version", "")).split(".")[0]
        cap = self.capabilities.get((cap_name, major))
        job = Job(self.agent, m, m.task_id)
        if cap is None:
            await job._send(
                "agentbus.task.result.v1",
                {"status": "rejected", "rejection_reason": "capability_unsupported"},
            )
            return
        await job._send("agentbus.task.accept.v1", {})
        self.jobs[job.task_id] = job
        t = asyncio.create_task(self._work(cap, job))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _heartbeat(self, job: Job) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            await job.progress(note="working")

    async def _work(self, cap: Capability, job: Job) -> None:
        beat = asyncio.create_task(self._heartbeat(job))
        outcome = "failed"
        try:
            params = list(inspect.signature(cap.handler).parameters)
            arg: Any = job.input if params == ["input"] else job
            work = cap.handler(arg)
            if inspect.isawaitable(work):
                work = asyncio.ensure_future(work)
                cancel_wait = asyncio.ensure_future(job.cancelled.wait())
                done, _ = await asyncio.wait({work, cancel_wait}, return_when=asyncio.FIRST_COMPLETED)
                if work not in done:
                    work.cancel()
                    raise Cancelled(job.task_id)
                cancel_wait.cancel()
                value = work.result()
            else:
                value = work
            job.check_cancelled()
            result = value if isinstance(value, Result) else (
                Result(summary=value) if isinstance(value, str) else Result(output=value)
            )
            data: dict[str, Any] = {"status": "succeeded"}
            if result.output is not None:
                problems = _check_output(result.output, cap, job)
                if problems:
                    await job._send(
                        "agentbus.task.result.v1",
                        {"status": "failed", "failure": {
                            "code": "output_invalid",
                            "message": "the output does not fit the output schema: " + "; ".join(problems),
                            "retryable": False,
                        }},
                    )
                    outcome = "output_invalid"
                    return
                data["output"] = dict(result.output)
            if result.summary is not None:
                data["summary"] = result.summary
            await job._send("agentbus.task.result.v1", data)
            outcome = "succeeded"
        except Cancelled:
            # The worker's word ends the task now rather than after the cancel grace (§6).
            await job._send(
                "agentbus.task.result.v1",
                {"status": "failed", "failure": {"code": "cancelled", "message": "cancelled by the requester"}},
            )
            outcome = "cancelled"
        except TaskFailed as e:
            await job._send(
                "agentbus.task.result.v1",
                {"status": "failed", "failure": {"code": e.code, "message": str(e), "retryable": e.retryable}},
            )
        except Exception as e:  # noqa: BLE001 - a handler's crash fails its task, not the worker
            await job._send(
                "agentbus.task.result.v1",
                {"status": "failed", "failure": {"code": "handler_error", "message": f"{type(e).__name__}: {e}"}},
            )
        finally:
            beat.cancel()
            self.jobs.pop(job.task_id, None)
            self.finished.append((job.task_id, outcome))


def _check_output(output: Mapping[str, Any], cap: Capability, job: Job) -> list[str]:
    problems: list[str] = []
    constraints = job.request.data.get("constraints")
    schemas = [cap.output_schema]
    if isinstance(constraints, dict):
        schemas.append(constraints.get("output_schema"))
    for schema in schemas:
        if isinstance(schema, dict):
            v = jsonschema.Draft202012Validator(schema)
            for err in v.iter_errors(output):
                pointer = "/" + "/".join(str(p) for p in err.absolute_path)
                problems.append(f"{pointer}: {err.message}")
    return problems
