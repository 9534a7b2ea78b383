"""`wait_at_most` (agent/protocol/context.py): a bounded wait for a handler that runs
outside an asyncio Task, as the server steps them (`_Handler`). `asyncio.wait_for` raised
"Timeout should be used inside a task" there on Python 3.12+, which closed the connection
of a Produce waiting for buffer.memory room."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from agent.protocol.context import Wakeup, wait_at_most


def _run_without_task(coro: Coroutine[Any, Any, None]) -> list[str]:
    """Step `coro` on a fresh loop from its awaited futures' callbacks, no Task made (as
    the server's `_Handler` does); returns what happened: 'done' or the error's text."""
    loop = asyncio.new_event_loop()
    outcome: list[str] = []

    def step(_: object = None) -> None:
        try:
            yielded = coro.send(None)
        except StopIteration:
            outcome.append("done")
            loop.stop()
        except Exception as error:  # what the handler would have failed with
            outcome.append(f"{type(error).__name__}: {error}")
            loop.stop()
        else:
            assert asyncio.isfuture(yielded)
            yielded._asyncio_future_blocking = False
            yielded.add_done_callback(step)

    try:
        loop.call_soon(step)
        loop.run_forever()
        assert asyncio.current_task(loop) is None
    finally:
        loop.close()
    return outcome


def test_it_returns_after_the_timeout_without_a_task() -> None:
    wakeup = Wakeup()
    waited: list[float] = []

    async def handler() -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await wait_at_most(wakeup.changed(), 0.05)
        waited.append(loop.time() - start)

    assert _run_without_task(handler()) == ["done"]
    assert 0.04 <= waited[0] < 5


def test_it_returns_when_notified_and_the_shared_future_stays_for_others() -> None:
    wakeup = Wakeup()
    seen: list[bool] = []

    async def handler() -> None:
        loop = asyncio.get_running_loop()
        changed = wakeup.changed()
        other = loop.create_future()  # a second waiter on the same change
        changed.add_done_callback(lambda _: other.set_result(None))
        loop.call_soon(wakeup.notify)
        start = loop.time()
        await wait_at_most(changed, 60)
        seen.append(loop.time() - start < 30)
        seen.append(other.done())
        seen.append(wakeup.changed() is not changed)  # the next change has a new future

    assert _run_without_task(handler()) == ["done"]
    assert seen == [True, True, True]


def test_an_early_timeout_leaves_the_shared_future_pending() -> None:
    wakeup = Wakeup()
    left: list[bool] = []

    async def handler() -> None:
        changed = wakeup.changed()
        await wait_at_most(changed, 0.01)
        left.append(changed.done())

    assert _run_without_task(handler()) == ["done"]
    assert left == [False]


# Code that runs in an asyncio Task of its own may bound its waits with asyncio's timeouts;
# (file, function) of each: the TLS reloader is the server's own task.
RUN_IN_TASKS = {("agent/protocol/server.py", "_reload_tls")}
NEEDS_A_TASK = {"wait_for", "timeout", "timeout_at", "TaskGroup"}


def test_no_handler_path_uses_what_needs_a_task() -> None:
    """Every asyncio call that needs the current task (Python 3.12+) in agent/ is in code
    run in a task of its own; a request handler's path waits with `wait_at_most`."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    found = set()
    for path in sorted((root / "agent").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                if (isinstance(node, ast.Attribute) and node.attr in NEEDS_A_TASK
                        and isinstance(node.value, ast.Name) and node.value.id == "asyncio"):
                    found.add((str(path.relative_to(root)), func.name))
    assert found <= RUN_IN_TASKS, sorted(found - RUN_IN_TASKS)
