"""Sending a reply's buffers to the socket as they are, with writev(2): no joining, no copy.

On Python 3.11 asyncio's `writelines` joins its buffers into one bytes object, and what the
socket does not take at once is copied into the transport's bytearray, whose sent head is
then deleted (moving the rest) after every send: a 50 MiB Fetch reply was copied several
times over. Here each buffer (Fetch's record bytes are views of the segment cache) goes to
the kernel from where it lies, up to IOV_MAX buffers per system call; when the socket is
full the sender waits for it to become writable (the event loop's writer callback), and
other connections go on meanwhile.

The agent's TLS listeners encrypt and send their replies themselves (tlsconn.py, the same
way once encrypted). The transport stays in charge of reading and closing; it never holds
written data because every reply of a connection is written here in order (by its sender
task, or at once with `write_now` when the sender has nothing in hand). The loop refuses a
writer callback on a transport's descriptor, so the wait registers a duplicate of it (same
socket, another descriptor number), closed as soon as the reply is out.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence

from .codec import Buffer

IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


async def send_buffers(transport: asyncio.WriteTransport, buffers: Sequence[Buffer]) -> None:
    """Write `buffers` in order to `transport`'s socket; ConnectionError if the peer is
    gone."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        raise TypeError("send_buffers needs a socket transport")
    if transport.get_write_buffer_size():  # written through the transport: after that
        transport.writelines(buffers)
        return
    if transport.is_closing():
        raise ConnectionResetError("connection closed")
    fd = sock.fileno()
    rest = write_now(fd, buffers)
    if not rest:
        return
    loop = asyncio.get_running_loop()
    waiting_fd = os.dup(fd)  # the duplicate the loop watches for writability
    try:
        while rest:
            await _writable(loop, waiting_fd)
            rest = write_now(fd, rest)
    finally:
        os.close(waiting_fd)


def write_now(fd: int, buffers: Sequence[Buffer]) -> list[memoryview]:
    """Write as much of `buffers` to the socket `fd` as it takes now, in order; what is
    left (empty: all went out). OSError (ConnectionError if the peer is gone) as writev."""
    sent = 0
    if len(buffers) <= IOV_MAX:  # most replies go out whole in this one call
        with contextlib.suppress(BlockingIOError, InterruptedError):
            sent = os.writev(fd, buffers)
        if sent == sum([len(b) for b in buffers]):
            return []
    views = [memoryview(b) for b in buffers if len(b)]
    i = _past(views, 0, sent)
    while i < len(views):
        try:
            sent = os.writev(fd, views[i:i + IOV_MAX])
        except (BlockingIOError, InterruptedError):
            break
        i = _past(views, i, sent)
    return views[i:]


def _past(views: list[memoryview], i: int, sent: int) -> int:
    """The index of the first of `views` from `i` not wholly sent once `sent` more bytes
    went out, that one re-sliced past what went out of it."""
    while sent:
        size = len(views[i])
        if sent < size:
            views[i] = views[i][sent:]
            break
        sent -= size
        i += 1
    return i


async def _writable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    """Return when `fd` can take more bytes (or has failed: the next write raises)."""
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(fd, wake)
    try:
        await ready
    finally:
        loop.remove_writer(fd)
