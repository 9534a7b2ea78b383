"""`cli.interrupt.Stop`: a signal is recorded, raises only while waiting for input, and a
second one while the command finishes exits at once (130)."""

from __future__ import annotations

import signal

import pytest

from cli.interrupt import EXIT_INTERRUPTED, Interrupted, Stop


class Exited(Exception):
    pass


def _exit(code: int) -> None:
    raise Exited(code)


def test_first_signal_is_recorded_and_raises_only_while_waiting() -> None:
    stop = Stop()
    stop._handle(signal.SIGTERM, None)  # busy handing a record over: no raise
    assert stop.requested and stop.signum == signal.SIGTERM
    with pytest.raises(Interrupted), stop.wait():  # already requested: no new read
        pytest.fail("read after a stop")
    waiting = Stop()
    with pytest.raises(Interrupted), waiting.wait():
        waiting._handle(signal.SIGINT, None)
    assert waiting.signum == signal.SIGINT and not waiting.waiting


def test_second_signal_exits_at_once(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("os._exit", _exit)
    stop = Stop()
    stop._handle(signal.SIGINT, None)
    with pytest.raises(Exited) as exited:
        stop._handle(signal.SIGINT, None)
    assert exited.value.args == (EXIT_INTERRUPTED,)
    assert "second SIGINT: exiting now" in capsys.readouterr().err
