"""The fault proxy: forwards untouched at rate 0, injects what it is told or what its seed
draws, and counts injected faults and the client's retries of them."""

from __future__ import annotations

import http.client

import pytest

from faults.proxy import ERROR500, FAULTS, RESET, SLOW, SLOWDOWN, FaultProxy
from objectstore.testserver import RecordingMotoServer


def request(proxy: FaultProxy, method: str, path: str) -> int | None:
    """The answer's status, None if the connection was dropped."""
    host, port = proxy.endpoint_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path)
        return conn.getresponse().status
    except (ConnectionError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def test_scripted_faults_are_counted_and_so_are_retries(
        moto_server: RecordingMotoServer) -> None:
    with FaultProxy(moto_server.endpoint_url, slow_s=0.0) as proxy:
        assert request(proxy, "GET", "/") == 200  # ListBuckets, forwarded
        proxy.inject(SLOWDOWN, ERROR500, RESET, SLOW)
        assert request(proxy, "GET", "/") == 503
        assert request(proxy, "GET", "/") == 500
        assert request(proxy, "GET", "/") is None
        assert request(proxy, "GET", "/") == 200  # slow, then answered
        assert request(proxy, "POST", "/moto-api/reset") == 200  # never faulted or counted
        counts = proxy.counts()
        assert counts.requests == 5
        assert counts.injected == {SLOWDOWN: 1, ERROR500: 1, RESET: 1, SLOW: 1}
        assert counts.failures_injected == 3 and counts.retried == 3


def test_a_seed_draws_the_same_faults(moto_server: RecordingMotoServer) -> None:
    def draw(seed: int) -> list[int | None]:
        with FaultProxy(moto_server.endpoint_url, rate=0.5, seed=seed,
                        faults=(SLOWDOWN, ERROR500)) as proxy:
            return [request(proxy, "GET", "/") for _ in range(12)]

    first = draw(5)
    assert first == draw(5) and {503, 500} <= set(first) and 200 in first


def test_bad_settings_are_refused(moto_server: RecordingMotoServer) -> None:
    with pytest.raises(ValueError, match="rate"):
        FaultProxy(moto_server.endpoint_url, rate=1.5)
    with pytest.raises(ValueError, match="faults must be some of"):
        FaultProxy(moto_server.endpoint_url, faults=("meteor",))
    with pytest.raises(ValueError, match="upstream"):
        FaultProxy("https://example.com")
    assert len(FAULTS) == 5
