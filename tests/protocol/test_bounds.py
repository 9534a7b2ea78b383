"""Decoding is bounded (agent/protocol/bounds.py): for every API key and version the server
dispatches, valid requests built with kio and every mutation of their length fields (0, -1,
2^31-1, 2^35-2 ...), truncations and random bytes either decode or raise ProtocolError, and
none makes the decoder allocate more than a small multiple of the frame.

The mutations run in a child process whose address space is capped (RLIMIT_AS): kio's
native reader would abort it (one 24-byte frame reserves 256 GiB) or fail to reserve 16 GiB
there, so a length the walker lets through shows as the child's death, and Python-side
allocations are measured with tracemalloc per frame."""

from __future__ import annotations

import dataclasses
import datetime
import random
import resource
import struct
import subprocess
import sys
import tracemalloc
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from agent.protocol.apis import TABLE
from agent.protocol.bounds import length_positions, walker
from agent.protocol.codec import decode_request
from agent.protocol.errors import ProtocolError
from agent.protocol.schema_fields import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
)
from faults.frames import encode_request, uvarint

from .server import REPO

# The killer frame (Metadata v12, a compact array of 2^35-2 topics) and an int32
# array of 2^31-1 topics in Metadata v1: size prefix included.
KILLERS = [bytes.fromhex("000000140003000c0000000b000466757a7a00ffffffff7f"),
           struct.pack(">ihhih4si", 18, 3, 1, 7, 4, b"fuzz", 2**31 - 1)]
# Lengths written at every length position, by its kind.
VALUES = {"i8": (0, -1), "i16": (0, -1, -2, 2**15 - 1), "i32": (0, -1, -2, 2**31 - 1),
          "uvarint": (0, 1, 2**31, 2**35 - 2)}
# What decoding one frame may allocate on the Python side: this many times the frame, plus
# a constant for kio's per-call objects.
EXPANSION, SLACK = 64, 64 * 1024
# Padding after a request whose array lengths are then set to fill it (dense arrays of
# zero-byte elements: the most objects a frame of that size can make kio build).
PADDING = 4096
# The child's address space: what it has after imports plus this.
HEADROOM = 1 << 30

_SAMPLES: dict[str, Any] = {
    "bool": True, "int8": 1, "uint8": 1, "int16": 1, "uint16": 1, "int32": 1, "uint32": 1,
    "int64": 1, "uint64": 1, "float64": 1.0, "string": "ab", "bytes": b"ab",
    "records": b"ab", "uuid": uuid.UUID(int=1), "error_code": ErrorCode.none,
    "timedelta_i32": datetime.timedelta(milliseconds=1),
    "timedelta_i64": datetime.timedelta(milliseconds=1),
    "datetime_i64": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
}


def sample(cls: type) -> Any:
    """An instance of kio entity `cls` with every field set (two elements per array), so
    that every length position of its version appears on the wire."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField):
            values[f.name] = (sample(kind.type_), sample(kind.type_))
        elif isinstance(kind, EntityField):
            values[f.name] = sample(kind.type_)
        elif isinstance(kind, PrimitiveTupleField):
            one = _SAMPLES[get_schema_field_type(f)]
            values[f.name] = (one, one)
        else:
            values[f.name] = _SAMPLES[get_schema_field_type(f)]
    return cls(**values)


def encode(api_key: int, version: int, request: Any) -> bytes:
    """Header and body of a request (no size prefix: what the server decodes)."""
    return encode_request(api_key, version, request, correlation_id=7)


def served() -> Iterator[tuple[int, int]]:
    for key, api in sorted(TABLE.items()):
        for version in range(api.min_version, api.max_version + 1):
            yield key, version


def _varint_size(payload: bytes, at: int) -> int:
    size = 1
    while at + size - 1 < len(payload) and payload[at + size - 1] & 0x80 and size < 5:
        size += 1
    return size


def mutations(payload: bytes, key: int, version: int, seed: int) -> Iterator[bytes]:
    """Every length position set to each of VALUES; truncations; random tails and bytes."""
    for at, kind in length_positions(payload, key, version):
        for value in VALUES[kind]:
            if kind == "uvarint":
                new = uvarint(value)
                yield payload[:at] + new + payload[at + _varint_size(payload, at):]
            else:
                size = {"i8": 1, "i16": 2, "i32": 4}[kind]
                new = value.to_bytes(size, "big", signed=True)
                yield payload[:at] + new + payload[at + size:]
    padded = payload + bytes(PADDING)
    for at, kind in length_positions(payload, key, version):
        if kind in ("i32", "uvarint"):
            for least in (1, 2, 4, 8, 16):
                count = (len(padded) - at) // least
                new = (uvarint(count + 1) if kind == "uvarint"
                       else count.to_bytes(4, "big", signed=True))
                size = _varint_size(payload, at) if kind == "uvarint" else 4
                yield padded[:at] + new + padded[at + size:]
    for end in range(len(payload)):
        yield payload[:end]
    rng = random.Random(seed * 1_000_003 + key * 100 + version)
    for _ in range(16):  # a valid header, then random bytes
        yield payload[:8] + rng.randbytes(rng.randrange(1, 64))
    for _ in range(16):  # a few bytes of the valid request flipped
        flipped = bytearray(payload)
        for _ in range(rng.randrange(1, 4)):
            flipped[rng.randrange(8, len(flipped))] = rng.randrange(256)
        yield bytes(flipped)


def fuzz(seed: int) -> tuple[int, int, float]:
    """Decode every mutation of every served version: (frames, refused, largest ratio of
    Python-side allocation to frame size among frames of PADDING bytes or more). Raises
    AssertionError on anything but success or ProtocolError, or an allocation past
    EXPANSION x the frame + SLACK."""
    frames = refused = 0
    worst = 0.0
    tracemalloc.start()
    try:
        for key, version in served():
            payload = encode(key, version, sample(load_request_schema(key, version)))
            decode_request(payload, key, version)  # compiled outside the measure
            for frame in mutations(payload, key, version, seed):
                tracemalloc.reset_peak()
                base = tracemalloc.get_traced_memory()[0]
                try:
                    decode_request(frame, key, version)
                except ProtocolError:
                    refused += 1
                peak = tracemalloc.get_traced_memory()[1] - base
                assert peak <= EXPANSION * len(frame) + SLACK, (key, version, frame.hex())
                if len(frame) >= PADDING:
                    worst = max(worst, peak / len(frame))
                frames += 1
    finally:
        tracemalloc.stop()
    return frames, refused, worst


@pytest.mark.parametrize(("key", "version"), list(served()))
def test_valid_request_walks_to_its_end(key: int, version: int) -> None:
    """The walker reads a version exactly as kio writes it (every field, tagged ones too)
    and lets it through."""
    request = sample(load_request_schema(key, version))
    payload = encode(key, version, request)
    assert walker(key, version)(payload, 0, len(payload)) == len(payload)
    assert decode_request(payload, key, version)[1] == request
    assert length_positions(payload, key, version)


def test_killer_frames_refused() -> None:
    for killer in KILLERS:
        body = killer[4:]
        key, version = struct.unpack_from(">hh", body)
        with pytest.raises(ProtocolError, match="array of"):
            decode_request(body, key, version)


# Requests with a null array (-1; compact 0): (key, version, body after the header, null
# allowed). Produce's topic_data is never nullable; Metadata's topics are from v1.
NULL_ARRAYS = [
    (0, 3, struct.pack(">hhii", -1, -1, 30_000, -1), False),
    (0, 9, b"\x00" + struct.pack(">hi", -1, 30_000) + b"\x00\x00", False),
    (3, 0, struct.pack(">i", -1), False),
    (3, 1, struct.pack(">i", -1), True),
    (3, 12, b"\x00\x00\x00\x00", True),  # topics null, two booleans, no tagged fields
]


@pytest.mark.parametrize(("key", "version", "body", "nullable"), NULL_ARRAYS)
def test_a_null_array_passes_only_where_the_schema_allows_it(
        key: int, version: int, body: bytes, nullable: bool) -> None:
    """As Kafka's readers ("non-nullable field ... was serialized as null"): kio would hand
    the handler None for an array it then iterates (a handler failure per such frame)."""
    header = struct.pack(">hhih", key, version, 7, 4) + b"fuzz"
    if version >= 9:  # flexible (both APIs from v9): the header's tagged fields
        header += b"\x00"
    if nullable:
        assert decode_request(header + body, key, version)[1].topics is None
    else:
        with pytest.raises(ProtocolError, match="array"):
            decode_request(header + body, key, version)


def _fetch_v15(cluster_id: str | None, replica_tags: bytes = b"") -> bytes:
    """A Fetch v15 frame (no size prefix) whose tagged fields are cluster_id (tag 0) and
    replica_state (tag 1, an entity with a tagged section of its own), which kio encodes:
    `replica_tags` replaces that inner section's empty count."""
    from kio.schema.fetch.v15.request import FetchRequest, ReplicaState
    from kio.schema.types import BrokerId
    from kio.static.primitive import i8, i32, i32Timedelta, i64

    request = FetchRequest(cluster_id=cluster_id, replica_state=ReplicaState(
        replica_id=BrokerId(7), replica_epoch=i64(3)), max_wait=i32Timedelta.parse(
        datetime.timedelta(milliseconds=5)), min_bytes=i32(1), max_bytes=i32(1 << 20),
        isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1), topics=(),
        forgotten_topics_data=(), rack_id="")
    frame = encode(1, 15, request)
    if replica_tags:  # the entity's 12 bytes of int32 and int64, then its empty section
        at = frame.index(struct.pack(">iq", 7, 3) + b"\x00") + 12
        frame = frame[:at] + replica_tags + frame[at + 1:]
    return frame


def test_tagged_fields_a_version_does_not_define_are_dropped() -> None:
    """As Kafka's generated readers (`_unknownTaggedFields`): a newer client may send tagged
    fields this version does not define; they are read past, the known ones kept. kio
    refuses them, so they are dropped before it decodes (the connection closed before)."""
    plain = _fetch_v15("c1")
    tail = plain.rindex(b"\x02")  # the body's section: 2 fields (tags 0 and 1)
    extra = uvarint(9) + uvarint(3) + b"new"  # tag 9, 3 bytes: nothing Fetch defines
    frame = plain[:tail] + b"\x03" + plain[tail + 1:] + extra
    # and one in the header's section (empty in `plain`: after the client id "fuzz")
    head = plain.index(b"fuzz") + 4
    frame = frame[:head] + b"\x01" + uvarint(5) + uvarint(1) + b"x" + frame[head + 1:]
    header, request = decode_request(frame, 1, 15)
    assert (header, request) == decode_request(plain, 1, 15)
    assert request.cluster_id == "c1" and request.replica_state.replica_epoch == 3
    # inside a known tagged field (replica_state): dropping it would change that field's
    # size as well; refused, as before
    nested = _fetch_v15("c1", b"\x01" + uvarint(4) + uvarint(1) + b"y")
    with pytest.raises(ProtocolError, match="inside a tagged field"):
        decode_request(nested, 1, 15)


def test_mutations_decode_or_refuse_in_bounded_memory() -> None:
    """Every mutation, in a child capped at its size after imports + 1 GiB."""
    done = subprocess.run([sys.executable, "-m", "tests.protocol.test_bounds", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    frames, refused, worst = done.stdout.split()
    assert int(frames) > 10_000 and 0 < int(refused) < int(frames)
    assert float(worst) <= EXPANSION


def _cap_address_space() -> None:
    with open("/proc/self/status") as status:
        vm = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + HEADROOM, vm + HEADROOM))


if __name__ == "__main__":
    _cap_address_space()
    for killer in KILLERS:  # kio itself would abort here
        key, version = struct.unpack_from(">hh", killer, 4)
        with pytest.raises(ProtocolError):
            decode_request(killer[4:], key, version)
    n, bad, ratio = fuzz(int(sys.argv[1]))
    print(n, bad, f"{ratio:.1f}")
