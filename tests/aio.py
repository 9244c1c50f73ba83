"""Running a coroutine from a test, whatever loop this thread already has."""
import asyncio
import threading


def run_in_fresh_loop(coro_fn, timeout: float = 120):
    """asyncio.run in its own thread: the browser tests' Playwright session keeps an event loop
    running in the main thread, where asyncio.run would refuse to start."""
    box = {}

    def target():
        try:
            box["result"] = asyncio.run(coro_fn())
        except BaseException as exc:  # re-raised in the caller
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if "error" in box:
        raise box["error"]
    return box["result"]
