"""The server's refusal lines are rate-limited per reason, and what was held back is summed
up in one line."""

from __future__ import annotations

import logging
import time

import pytest

from agent.protocol import refusals
from agent.protocol.refusals import Refusals


def test_lines_per_reason_are_capped_and_the_rest_summed_up(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    said = Refusals(lines_per_second=3)
    with caplog.at_level(logging.DEBUG, logger=refusals.log.name):
        for i in range(10):
            said.refused("malformed_request", "bad frame %d", i)
        said.refused("idle", "idle %d", 0, level=logging.DEBUG)
        now[0] += 1.5
        said.flush()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["bad frame 0", "bad frame 1", "bad frame 2", "idle 0",
                     "malformed_request: 7 more lines suppressed in the last 1.5 s"]
    assert caplog.records[3].levelno == logging.DEBUG
