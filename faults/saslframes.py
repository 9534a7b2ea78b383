"""Adversarial SASL conversations for the protocol suite's SASL_PLAINTEXT listener
(faults/suites/protocol.py, phase 5).

A `Conversation` is what one connection sends: a `prefix` the agent answers `answers`
times (a v1 SaslHandshake, or a whole PLAIN login), then the frame under test. The sets:

- `before_handshake`: SaslHandshake (v0-1) and SaslAuthenticate (v0-2) frames with every
  length at 0, -1, 2^31-1 and 2^35-2, random mutants and (in `make chaos`) every
  truncation, of requests naming an enabled mechanism; SaslAuthenticate mutants also after
  a good handshake of each mechanism, and raw garbage tokens after a v0 one;
- `bad_tokens`: garbage PLAIN messages and SCRAM client-first messages (missing
  attributes, bad gs2 headers and escapes, another authzid, non-UTF-8, huge names and
  nonces) as every SaslAuthenticate version; the client-final ones need the server's nonce
  and are built during the conversation (`bad_finals`);
- `out_of_turn`: every API version's sample request in the middle of an exchange (Kafka
  answers ILLEGAL_SASL_STATE in that API's response, then closes).

After a successful login the suite also sends every API version's mutants (frames.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import random
from collections.abc import Callable, Iterator

from kio.index import load_request_schema

from agent.protocol.apis import SASL_AUTHENTICATE, SASL_HANDSHAKE, TABLE

from . import frames
from .frames import Conversation, Frame

PLAIN_USER, SCRAM_USER = "fz-plain", "fz-scram"
PASSWORD = "fz-s3cret"
SCRAM = "SCRAM-SHA-512"
MECHANISMS = ("PLAIN", SCRAM)
HUGE = 400_000  # bytes: under sasl.server.max.receive.size (512 KiB), as big as it lets in


def _body(api_key: int, version: int, **values: object) -> bytes:
    """A request of that API version, the sample's fields but `values` (frames.sample)."""
    import dataclasses

    cls = load_request_schema(api_key, version)
    base = frames.sample(cls, api_key, frames.good_batch([b"fuzz"]))
    return frames.encode_request(api_key, version, dataclasses.replace(base, **values))


def handshake(mechanism: str, version: int = 1) -> bytes:
    return frames.framed(_body(SASL_HANDSHAKE, version, mechanism=mechanism))


def authenticate(token: bytes, version: int = 2) -> bytes:
    return frames.framed(_body(SASL_AUTHENTICATE, version, auth_bytes=token))


def plain_login() -> bytes:
    """A good PLAIN login (two frames, two answers)."""
    return handshake("PLAIN") + authenticate(f"\0{PLAIN_USER}\0{PASSWORD}".encode())


def versions(api_key: int) -> range:
    """The versions of `api_key` the agent serves."""
    api = TABLE[api_key]
    return range(api.min_version, api.max_version + 1)


def before_handshake(trials: int, rng: random.Random, every_truncation: bool
                     ) -> Iterator[Conversation]:
    for version in versions(SASL_HANDSHAKE):
        for mechanism in MECHANISMS:
            body = _body(SASL_HANDSHAKE, version, mechanism=mechanism)
            for frame in frames.mutants(SASL_HANDSHAKE, version, trials, rng,
                                        every_truncation, body):
                yield Conversation(b"", 0, frame)
    for mechanism in MECHANISMS:
        for version in versions(SASL_AUTHENTICATE):
            token = b"n,,n=fz-scram,r=fuzz" if mechanism == SCRAM else b"\0fz\0fz"
            body = _body(SASL_AUTHENTICATE, version, auth_bytes=token)
            for frame in frames.mutants(SASL_AUTHENTICATE, version, trials, rng,
                                        every_truncation, body):
                yield Conversation(handshake(mechanism), 1, frame)
                if mechanism == "PLAIN":  # before any handshake: closed unanswered
                    yield Conversation(b"", 0, frame)
        for n in range(max(trials, 1)):  # v0 handshake: tokens are raw frames
            token = rng.randbytes(rng.choice((0, 1, 64, 4096)))
            yield Conversation(handshake(mechanism, 0), 1,
                               Frame(frames.framed(token), f"raw {mechanism} token {n}"),
                               raw=True)


PLAIN_TOKENS: tuple[bytes, ...] = (
    b"", b"\0", b"\0\0", b"\0fz-plain", b"fz-plain\0" + PASSWORD.encode(),
    b"\0fz-plain\0", b"\0\0" + PASSWORD.encode(), b"a\0b\0c\0d",
    b"other\0fz-plain\0" + PASSWORD.encode(), b"\0fz-plain\0wrong", b"\0nobody\0pw",
    b"\0\xff\xfe\0pw", b"\xc3(\0fz-plain\0pw", b"\0fz-plain\0" + b"p" * HUGE,
    b"\0" + b"u" * HUGE + b"\0pw",
)
SCRAM_FIRSTS: tuple[bytes, ...] = (
    b"", b"n,,", b"n,,n=fz-scram", b"n,,r=abc", b"y,,n=fz-scram,r=abc",
    b"p=tls-server-end-point,,n=fz-scram,r=abc", b"n,a=other,n=fz-scram,r=abc",
    b"n,,n=fz=scram,r=abc", b"n,,n=fz=2scram,r=abc", b"n,,n=fz-scram,r=",
    b"n,,n=fz-scram,r=abc,tokenauth=true", b"n,,n=nobody,r=abc", b"n,,n=\xff\xfe,r=abc",
    b"\xc3\x28", b"n,,n=fz-scram,r=abc\x00def", b"n,,n=fz-scram,r=a,b,c",
    b"n,,n=fz-scram,r=abc,m=ext", b"n,,m=ext,n=fz-scram,r=abc",
    b"n,,n=fz-scram,r=" + b"a" * HUGE, b"n,,n=" + b"u" * HUGE + b",r=abc",
    b"n,,n=fz-scram,r=abc," + b"x=" * (HUGE // 2),
)


def bad_tokens() -> Iterator[Conversation]:
    """Garbage first messages of PLAIN and SCRAM, as every SaslAuthenticate version."""
    for mechanism, tokens in (("PLAIN", PLAIN_TOKENS), (SCRAM, SCRAM_FIRSTS)):
        for version in versions(SASL_AUTHENTICATE):
            for token in tokens:
                yield Conversation(handshake(mechanism), 1, Frame(
                    authenticate(token, version),
                    f"{mechanism} token {token[:40]!r} (+{max(len(token) - 40, 0)} bytes)"
                    f" as SaslAuthenticate v{version}"), must_fail=mechanism == "PLAIN")


def out_of_turn() -> Iterator[Conversation]:
    """Every API version's sample request (but SaslAuthenticate's) mid-exchange."""
    for key, api in sorted(TABLE.items()):
        if key == SASL_AUTHENTICATE:
            continue
        for version in range(api.min_version, api.max_version + 1):
            yield Conversation(handshake("PLAIN"), 1, Frame(
                frames.framed(frames.sample_body(key, version)),
                f"api {key} v{version} mid-exchange"))


# ------------------------------------------------------------------ SCRAM client-final

def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha512).digest()


def client_final(first_bare: str, server_first: str, password: str,
                 channel: str = "biws", nonce: str | None = None, extra: str = "") -> str:
    """RFC 5802's client-final message (SCRAM-SHA-512) for `password`, with the given
    channel binding, nonce (default the server's) and extra attributes before the proof."""
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), base64.b64decode(attrs["s"]),
                                 int(attrs["i"]))
    client_key = _hmac(salted, b"Client Key")
    without_proof = f"c={channel},r={attrs['r'] if nonce is None else nonce}{extra}"
    signature = _hmac(hashlib.sha512(client_key).digest(),
                      f"{first_bare},{server_first},{without_proof}".encode())
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


FIRST_BARE = "n=fz-scram,r=fuzz-client-nonce"
# Kinds of client-final message that may log in: the good one, and one with an extension
# attribute (RFC 5802 allows them; Kafka's ScramMessages too) whose proof covers it.
GOOD_FINALS = frozenset({"good", "extension before the proof"})
Final = Callable[[str], bytes]
"""server-first message -> the client-final token to send."""


def bad_finals() -> dict[str, Final]:
    """Garbage client-final messages by kind, built from the server's first message
    (`good` is the one valid final, for the login the suite fuzzes after)."""
    def final(**kw: str) -> Final:
        return lambda sf: client_final(FIRST_BARE, sf, PASSWORD, **kw).encode()

    def edit(fn: Callable[[str], str]) -> Final:
        return lambda sf: fn(client_final(FIRST_BARE, sf, PASSWORD)).encode()

    return {
        "good": final(),
        "wrong password": lambda sf: client_final(FIRST_BARE, sf, "wrong").encode(),
        "client nonce only": final(nonce="fuzz-client-nonce"),
        "another nonce": final(nonce="fuzz-client-nonce" + "x" * 32),
        "nonce with a suffix": lambda sf: client_final(
            FIRST_BARE, sf, PASSWORD, nonce=sf.split(",")[0][2:] + "zz").encode(),
        "channel binding y,,": final(channel=base64.b64encode(b"y,,").decode()),
        "channel binding not base64": final(channel="!!!"),
        "extension before the proof": final(extra=",x=1"),
        "no proof": edit(lambda m: m[:m.rindex(",p=")]),
        "no channel binding": edit(lambda m: m[m.index(",") + 1:]),
        "proof not base64": edit(lambda m: m[:m.rindex(",p=")] + ",p=!!!!"),
        "proof too short": edit(lambda m: m[:m.rindex(",p=")] + ",p=AAAA"),
        "proof huge": edit(lambda m: m[:m.rindex(",p=")] + ",p=" + "A" * HUGE),
        "attributes reordered": edit(lambda m: ",".join(reversed(m.split(",")))),
        "empty": lambda sf: b"",
        "not UTF-8": lambda sf: b"c=biws,r=\xff\xfe,p=AAAA",
        "NUL inside": edit(lambda m: m.replace(",p=", "\0,p=")),
    }
