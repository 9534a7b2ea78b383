"""The protocol suite (issue 22, and issue 25's SASL listener), bounded: a real agent must
survive every frame and keep every promise for a fixed list of seeds; the frames it sends
cover every served API version, hold issue 22's killers whatever the seed, and are the same
for the same seed; the SASL conversations cover every SaslHandshake and SaslAuthenticate
version, and the product's PLAIN and SCRAM servers refuse every garbage login of the
suite."""

from __future__ import annotations

import random
import struct

import crc32c
import pytest
from kio.schema.errors import ErrorCode

from agent.protocol.apis import TABLE
from agent.protocol.codec import frame
from agent.protocol.error_responses import error_response
from agent.sasl.errors import AuthenticationFailed
from agent.sasl.plain import PlainServer
from agent.sasl.scram import ScramServer, make_credential
from faults import frames, saslframes
from faults.suites import protocol
from fileformat.validate import check_client_batch

SEEDS = (1,)  # `make chaos --suite protocol` runs many more
ISSUE_KILLER = "000000140003000c0000000b000466757a7a00ffffffff7f"  # Metadata v12, 2^35-2


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_an_agent_survives_every_frame_and_keeps_every_promise(seed: int) -> None:
    figures = protocol.run(trials=2, seed=seed, max_deaths=3, produce_versions=(3, 8, 11))
    assert figures["violations"] == 0, figures["examples"]
    assert figures["agent deaths"] == figures["bad batches stored"] == 0
    assert figures["frames sent"] > 3000 and figures["frames skipped (max_deaths reached)"] == 0
    assert figures["SASL listener frames sent"] > 900
    assert figures["good records acked"] > 0
    assert figures["good records read back exactly"] == figures["good records acked"]


@pytest.mark.parametrize("seed", [1, 2, 99])
@pytest.mark.parametrize("trials", [0, 3])
def test_the_killer_frames_are_in_every_run(seed: int, trials: int) -> None:
    sent = [f.data for f in protocol.all_frames(trials, random.Random(seed), False)]
    assert bytes.fromhex(ISSUE_KILLER) in sent
    assert set(frames.KILLERS) <= set(sent)


def test_every_served_api_version_gets_its_lengths_at_every_value() -> None:
    sent = list(protocol.all_frames(1, random.Random(1), False))
    for key, api in TABLE.items():
        for version in range(api.min_version, api.max_version + 1):
            lengths = frames.length_fields(key, version)
            assert lengths, (key, version)
            mine = [f for f in sent if f.what.startswith(f"api {key} v{version} ")]
            assert len(mine) >= len(lengths) * len(frames.LENGTHS) + 1, (key, version)


def test_a_length_mutant_changes_only_its_field_and_the_size_prefix() -> None:
    body = frames.sample_body(3, 12)  # Metadata v12: topics is a compact array
    topics = next(at for at in frames.length_fields(3, 12) if at.path.endswith(".topics"))
    mutant = frames.set_length(body, topics, 2**35 - 2)
    assert mutant[topics.start:topics.start + 5] == bytes.fromhex("ffffffff7f")
    assert mutant[:topics.start] == body[:topics.start]
    assert mutant[topics.start + 5:] == body[topics.end:]
    framed = frames.framed(mutant)
    assert struct.unpack(">i", framed[:4])[0] == len(mutant)
    assert frames.encode_length("i16", 2**31 - 1) == b"\x7f\xff"
    assert frames.encode_length("i32", 2**35 - 2) == b"\x80\x00\x00\x00"
    assert frames.encode_length("uvar", -1) == b"\x00"


def test_the_same_seed_gives_the_same_frames() -> None:
    def run(seed: int) -> list[bytes]:
        return [f.data for f in protocol.all_frames(2, random.Random(seed), False)]

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_bad_batches_are_every_kind_of_issue_22_with_a_valid_crc() -> None:
    kinds = frames.bad_batches(producer_id=3, producer_epoch=0)
    for needed in ("count 2^31-1", "count 10^6", "extra records", "missing records",
                   "negative record length", "negative key length", "negative value length",
                   "negative header key length", "negative header value length",
                   "offset deltas out of order", "lastOffsetDelta != count-1",
                   "idempotent baseSequence -1", "bad magic 1", "bad crc"):
        assert needed in kinds
    for codec in frames.CODECS:
        assert f"{codec} garbage" in kinds and f"{codec} truncated" in kinds
    for kind, raw in kinds.items():
        crc_ok = struct.unpack_from(">I", raw, 17)[0] == crc32c.crc32c(raw[frames.CRC_FROM:])
        assert crc_ok == (kind != "bad crc"), kind
    # The same builder's valid batch is one the product stores.
    header, _ = check_client_batch(frames.good_batch([b"a", b"b"]), decode=True)
    assert header.record_count == 2


# ------------------------------------------------------------------ the SASL listener (phase 5)


def test_sasl_conversations_cover_every_sasl_version_and_are_the_same_for_a_seed() -> None:
    def conversations(seed: int) -> list[tuple[bytes, bytes]]:
        return [(c.prefix, c.frame.data) for c in saslframes.before_handshake(
            2, random.Random(seed), False)]

    assert conversations(3) == conversations(3) != conversations(4)
    sent = list(saslframes.before_handshake(0, random.Random(1), False))
    for key in (17, 36):
        for version in saslframes.versions(key):
            mine = [c for c in sent if c.frame.what.startswith(f"api {key} v{version} ")]
            assert len(mine) >= len(frames.LENGTHS), (key, version)
    # SaslAuthenticate mutants come after a good handshake of each mechanism, and raw
    # tokens after a v0 one (their answers are tokens, not responses)
    prefixes = {c.prefix for c in sent if c.frame.what.startswith("api 36 ")}
    assert {saslframes.handshake(m) for m in saslframes.MECHANISMS} <= prefixes
    assert any(c.raw and c.prefix == saslframes.handshake("PLAIN", 0) for c in sent)
    out_of_turn = {c.frame.what for c in saslframes.out_of_turn()}
    assert len(out_of_turn) == sum(len(range(a.min_version, a.max_version + 1))
                                   for k, a in TABLE.items() if k != 36)


def _scram_server() -> ScramServer:
    credential = make_credential(saslframes.SCRAM, saslframes.PASSWORD, 4096)
    return ScramServer(saslframes.SCRAM, lambda user, _m: credential
                       if user == saslframes.SCRAM_USER else None)


def test_every_garbage_login_fails_and_the_good_one_succeeds_in_process() -> None:
    """The product's own PLAIN and SCRAM servers against the suite's messages: every
    garbage PLAIN message and SCRAM client-final fails; the good final (and one with an
    extension, which RFC 5802 allows) logs in."""
    credential = make_credential("SCRAM-SHA-256", saslframes.PASSWORD, 4096)
    for token in saslframes.PLAIN_TOKENS:
        with pytest.raises(AuthenticationFailed):
            PlainServer(lambda user: [credential] if user == saslframes.PLAIN_USER
                        else []).step(token)
    for kind, final in saslframes.bad_finals().items():
        server = _scram_server()
        first = server.step(b"n,," + saslframes.FIRST_BARE.encode()).decode()
        if kind in saslframes.GOOD_FINALS:
            server.step(final(first))
            assert server.done and server.principal == saslframes.SCRAM_USER, kind
        else:
            with pytest.raises(AuthenticationFailed):
                server.step(final(first))


def test_replies_are_checked_against_their_requests_api_version() -> None:
    request = frames.framed(frames.sample_body(17, 1))
    good = frame(1, error_response(17, 1, None, ErrorCode.illegal_sasl_state))[4:]
    assert protocol.reply_problem(request, good) is None
    assert "correlation id" in (protocol.reply_problem(request, b"\0\0\0\x02" + good[4:]) or "")
    assert "past" in (protocol.reply_problem(request, good + b"\0") or "")
    assert "response" in (protocol.reply_problem(request, good[:6]) or "")
    assert [(len(f)) for f in frames.split(saslframes.plain_login())] == [
        len(saslframes.handshake("PLAIN")), len(saslframes.plain_login())
        - len(saslframes.handshake("PLAIN"))]
