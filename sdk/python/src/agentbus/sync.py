"""The sync twin of :class:`agentbus.Agent`: the same calls, blocking, for scripts and CI jobs.

Each sync agent runs the async one on an event loop in a background thread of its own, so the
sync calls can be used from code that has no event loop (and from threads).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, AsyncIterator, Callable, Coroutine, Iterator, Mapping, Optional, TypeVar

from . import client
from .client import Message, SendResult

T = TypeVar("T")


class _Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="agentbus")
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: Optional[float] = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        while True:
            try:
                yield self.run(agen.__anext__())  # type: ignore[arg-type]
            except StopAsyncIteration:
                return

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


class Task:
    """The sync twin of :class:`agentbus.client.Task`."""

    def __init__(self, loop: _Loop, inner: client.Task) -> None:
        self._loop = loop
        self.inner = inner
        self.id = inner.id

    def wait(self, timeout: Optional[float] = None) -> Mapping[str, Any]:
        return self._loop.run(self.inner.wait(timeout))

    def state(self) -> Mapping[str, Any]:
        return self._loop.run(self.inner.state())

    def progress(self) -> Iterator[Mapping[str, Any]]:
        return self._loop.iterate(self.inner.progress())

    def answer(self, text: str) -> SendResult:
        return self._loop.run(self.inner.answer(text))

    def cancel(self, reason: Optional[str] = None) -> SendResult:
        return self._loop.run(self.inner.cancel(reason))


class Agent:
    """Blocking calls over :class:`agentbus.client.Agent`."""

    def __init__(self, loop: _Loop, inner: client.Agent) -> None:
        self._loop = loop
        self.inner = inner

    @classmethod
    def connect(cls, gateway: Optional[str] = None, **kw: Any) -> "Agent":
        loop = _Loop()

        async def make() -> client.Agent:
            return await client.Agent.connect(gateway, **kw)

        return cls(loop, loop.run(make()))

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if callable(value) and asyncio.iscoroutinefunction(value):
            return lambda *a, **k: self._loop.run(value(*a, **k))
        return value

    def delegate(self, *a: Any, **k: Any) -> Task:
        return Task(self._loop, self._loop.run(self.inner.delegate(*a, **k)))

    def messages(self, **k: Any) -> Iterator[Message]:
        return self._loop.iterate(self.inner.messages(**k))

    def listen(self, handler: Callable[[Message], Any], **k: Any) -> None:
        for m in self.messages(**k):
            handler(m)

    def close(self) -> None:
        self._loop.run(self.inner.close())
        self._loop.stop()

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
