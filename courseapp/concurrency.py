"""At most a few HTTP requests run Django code at once; the others wait on the event loop.

Django's ASGI handler gives every request a thread of its own. With a class of 50 loading
pages at once that is 50 Python threads taking turns on one interpreter lock, and they also
queue on the locks inside asgiref's context-local storage (translation, URL prefixes) held by
whichever thread the interpreter just paused: measured on the 2-core machine, 22 req/s with
50 clients against a few hundred with the requests taken a few at a time. Waiting costs
nothing on the event loop, so queueing there is both faster and fairer (first come, first
served). Websockets are not limited: they spend their time waiting, not computing.
"""
import asyncio


class HttpConcurrencyLimit:
    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit
        self._slots: asyncio.Semaphore | None = None  # made on the server's loop, at first use

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        async with self._slots:
            return await self.app(scope, receive, send)
