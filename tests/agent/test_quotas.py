"""Client byte-rate quotas (agent/quotas.py) as Kafka's ClientQuotaManager computes them:
pure, on explicit times."""

from __future__ import annotations

from agent.quotas import FETCH, PRODUCE, QuotaManager, Rate, precedence
from metadata.quotas import CLIENT_ID, USER


def test_rate_is_the_samples_sum_over_at_least_samples_minus_one_windows() -> None:
    """Kafka's Rate: 1,000 bytes at t=0 over 11 one-second samples is 100 B/s (10 s, the
    minimum window); after 30 s the sample is gone."""
    rate = Rate()
    rate.record(1000, 0)
    assert rate.elapsed_ms(0) == 10_000 and rate.per_second(0) == 100.0
    rate.record(1000, 10_500)  # a new sample; the first one's is still within 11 s
    assert rate.elapsed_ms(10_500) == 10_500 and rate.per_second(10_500) == 2000 / 10.5
    assert rate.per_second(11_000) == 1000 / 10.5  # the first sample expired at 11 s
    assert Rate().per_second(5) == 0.0
    rate.record(0, 40_000)
    assert rate.per_second(40_000) == 0.0  # both samples expired


def test_throttle_time_is_kafkas_formula() -> None:
    """Past the quota: (rate - quota) / quota * window; within it: 0. 1,000 B/s quota,
    15,000 bytes at once: rate 1,500 B/s over 10 s -> 5,000 ms."""
    quotas = QuotaManager()
    quotas.set_quotas({((CLIENT_ID, "slow"),): {PRODUCE: 1000.0}})
    assert quotas.record(PRODUCE, "ANONYMOUS", "slow", 9_000, 0) == 0
    assert quotas.record(PRODUCE, "ANONYMOUS", "slow", 6_000, 0) == 5_000
    assert quotas.record(FETCH, "ANONYMOUS", "slow", 10**9, 0) == 0  # no fetch quota
    assert quotas.record(PRODUCE, "ANONYMOUS", "other", 10**9, 0) == 0  # no quota at all
    quotas.unrecord(PRODUCE, "ANONYMOUS", "slow", 6_000, 0)
    assert quotas.record(PRODUCE, "ANONYMOUS", "slow", 0, 0) == 0
    # Kafka's getMaxValueInQuotaWindow: what one response may carry, quota x 10 windows
    assert quotas.max_window_bytes(PRODUCE, "ANONYMOUS", "slow") == 10_000.0
    assert quotas.max_window_bytes(FETCH, "ANONYMOUS", "slow") == float("inf")


def test_precedence_and_sensors_follow_kafkas_default_callback() -> None:
    """The most specific stored quota applies; a default quota meters each client id on its
    own, a quota of a user all its client ids together."""
    assert precedence("u", "c")[0] == ((CLIENT_ID, "c"), (USER, "u"))
    quotas = QuotaManager()
    quotas.set_quotas({((CLIENT_ID, None),): {PRODUCE: 1000.0},
                       ((USER, "alice"),): {PRODUCE: 2000.0},
                       ((CLIENT_ID, "c1"), (USER, "alice")): {PRODUCE: 500.0}})
    assert quotas.quota(PRODUCE, "bob", "x") == (1000.0, ((CLIENT_ID, None),))
    assert quotas.quota(PRODUCE, "alice", "x") == (2000.0, ((USER, "alice"),))
    assert quotas.quota(PRODUCE, "alice", "c1") == (500.0, ((CLIENT_ID, "c1"), (USER, "alice")))
    # the default: each client id its own 1,000 B/s
    assert quotas.record(PRODUCE, "bob", "a", 10_000, 0) == 0
    assert quotas.record(PRODUCE, "bob", "b", 10_000, 0) == 0
    # alice's quota is the user's: her client ids x and y share 2,000 B/s
    assert quotas.record(PRODUCE, "alice", "x", 20_000, 0) == 0
    assert quotas.record(PRODUCE, "alice", "y", 20_000, 0) == 10_000
