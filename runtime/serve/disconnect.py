"""A client that leaves: the one place the endpoint notices it.

Nothing else tells a request's work that its client is gone: the app would go on computing an answer for no one,
an upstream generation or the local policy's slices included. ASGI says so with an ``http.disconnect`` message on
``receive()``, which the server delivers when the connection closes, so a request's work is raced against one
task awaiting that message: cancelled the moment the client leaves, with no polling interval, under any ASGI
server (and the same for a streamed response, whatever the server's ASGI version makes starlette do)."""
from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import Any, Awaitable, TypeVar

from fastapi import Request

from .protocol import APIError

T = TypeVar("T")


class ClientClosed(APIError):
    """The client disconnected before the answer was ready: 499, which nobody reads but the metrics count."""

    def __init__(self) -> None:
        super().__init__(499, "the client closed the connection before the answer was ready", code="client_closed")


async def _disconnected(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class ClientWatch:
    """Awaits the request's ``http.disconnect`` from its creation until :meth:`close`; :meth:`run` races work
    against it. Start it only once the request body has been read: it consumes what ``receive()`` delivers."""

    def __init__(self, request: Request):
        self._gone = asyncio.ensure_future(_disconnected(request.receive))

    async def run(self, work: Awaitable[T]) -> T:
        """``work``'s result, unless the client disconnects first: then ``work`` is cancelled (and has finished
        cancelling, so an upstream stream is closed) and :class:`ClientClosed` is raised."""
        task = asyncio.ensure_future(work)
        try:
            await asyncio.wait({task, self._gone}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                return task.result()
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
            raise ClientClosed()
        finally:
            if not task.done():     # this request itself cancelled (the server shutting down): so is its work
                task.cancel()

    def close(self) -> None:
        if not self._gone.done():
            self._gone.cancel()
        elif not self._gone.cancelled():
            self._gone.exception()      # a receive() that failed: the connection is gone too; nothing to report


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """``work``'s result, unless the client disconnects first (:meth:`ClientWatch.run`)."""
    watch = ClientWatch(request)
    try:
        return await watch.run(work)
    finally:
        watch.close()
