"""Adversarial Kafka request frames for the protocol suite (faults/suites/protocol.py).

`sample_frame(key, version)` is a valid request of that API version, built with kio from a
sample entity (one element in every array, every tagged field set, a record batch in
Produce) and encoded by kio; `length_fields(key, version, body)` walks kio's schema over
those bytes and finds every length on the wire (int16 string lengths, int32 array and bytes
lengths, the unsigned varints of compact ones, the count and sizes of tagged fields).
`mutants` then yields, deterministically for a seed, frames with each length set to 0, -1,
2^31-1 and 2^35-2 (as far as the field's width holds them), truncations, byte flips and
random bodies. `KILLERS` are frames known to have killed an agent (issue 22).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import random
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.static.primitive import Records, i16, i32

from agent.protocol.apis import TABLE
from agent.protocol.codec import write_uvarint

# Issue 22's killers: Metadata v12 whose topics compact array says 2^35-2 entries (kio's
# reader reserved 256 GiB and the agent aborted), and Metadata v1 with an int32 array of
# 2^31-1 topics (survived only because 16 GiB fit the machine).
KILLERS: tuple[bytes, ...] = (
    bytes.fromhex("000000140003000c0000000b000466757a7a00ffffffff7f"),
    bytes.fromhex("0000001200030001000000010004667a7a7a7fffffff"),
)

# The lengths every length field is set to (a field too narrow for one gets its width's
# extreme instead: int16 strings 32767 and -32768, int32 arrays -2^31 for 2^35-2).
LENGTHS = (0, -1, 2**31 - 1, 2**35 - 2)
TOPIC, GROUP = "fz", "fzg"  # the topic and group the sample requests name

# Sample values by field name (else by type: zeros, "fz", one element): produce with acks
# -1 so every Produce is answered, no long poll in Fetch, a producer id of none.
_INTS: dict[str, int] = {
    "acks": -1, "max_bytes": 1 << 20, "partition_max_bytes": 1 << 20, "num_partitions": 1,
    "replication_factor": 1, "producer_id": -1, "producer_epoch": -1, "replica_id": -1,
    "session_epoch": -1, "current_leader_epoch": -1, "log_start_offset": -1, "count": 2,
    "last_fetched_epoch": -1, "committed_leader_epoch": -1, "generation_id": -1,
    "member_epoch": -1, "generation_id_or_member_epoch": -1, "timestamp": -1,
}
_MS: dict[str, int] = {"timeout": 1000, "transaction_timeout": 60_000, "max_wait": 0,
                       "session_timeout": 0, "rebalance_timeout": 0, "retention_time": -1}
# Topic names per API where "fz" would do harm (DeleteTopics) or be a no-op (CreateTopics).
_TOPIC_OF_API = {19: "fz-new", 20: "fz-del"}
_TOPIC_FIELDS = {"name", "topic", "topic_names", "resource_name"}
_GROUP_FIELDS = {"group_id", "groups", "groups_names", "coordinator_keys"}


@dataclass(frozen=True, slots=True)
class Length:
    """One length on the wire: body[start:end] encodes it as `kind` (i16, i32: signed
    big-endian; uvar: an unsigned varint, compact lengths being n + 1; tags: a tagged-field
    count; tagsize: a tagged field's byte size); `path` names the field."""

    start: int
    end: int
    kind: str
    path: str


@dataclass(frozen=True, slots=True)
class Frame:
    """A frame to send (size prefix included) and what it is (`what`, for examples)."""

    data: bytes
    what: str

    @property
    def api(self) -> str:
        """The API's name (its handler module's: metadata, produce, ...), or `what`."""
        key = int.from_bytes(self.data[4:6], "big", signed=True) if len(self.data) >= 6 else -1
        return TABLE[key].name if key in TABLE else self.what

    def describe(self, limit: int = 96) -> str:
        hexed = self.data.hex()
        more = f"...(+{len(self.data) - limit // 2} bytes)" if len(hexed) > limit else ""
        return f"{self.what}: {hexed[:limit]}{more}"


@dataclass(frozen=True, slots=True)
class Conversation:
    """What one connection sends: `prefix` (well-formed requests: a SASL handshake or
    login), answered `answers` times, then `frame`. `raw`: the frame's answer is a bare SASL
    token, not a response (after a v0 SaslHandshake); `must_fail`: a login that must not
    be answered error 0 (a garbage PLAIN message)."""

    prefix: bytes
    answers: int
    frame: Frame
    raw: bool = False
    must_fail: bool = False


def split(data: bytes) -> list[bytes]:
    """The size-prefixed frames `data` holds, in order (a partial last one included)."""
    out, pos = [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos:pos + 4], "big", signed=True) if pos + 4 <= len(data) \
            else len(data)
        end = pos + 4 + max(size, 0)
        out.append(data[pos:end])
        pos = end
    return out


def uvarint(n: int) -> bytes:
    """An unsigned varint (flexible versions' lengths), as the server writes one."""
    out = bytearray()
    write_uvarint(out, n)
    return bytes(out)


def varint(n: int) -> bytes:
    """A zigzag varint (record fields)."""
    return uvarint((n << 1) ^ (n >> 63) if n < 0 else n << 1)


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


# ------------------------------------------------------------------ sample requests

def _inner(tp: Any) -> Any:
    """`X | None` -> X; tuple[X, ...] -> X."""
    import typing

    args = [a for a in typing.get_args(tp) if a is not type(None) and a is not Ellipsis]
    return _inner(args[0]) if args else tp


def _primitive(kafka_type: str, name: str, api_key: int, tp: Any, record_batch: bytes) -> Any:
    if kafka_type in ("int8", "int16", "int32", "int64"):
        return _inner(tp)(_INTS.get(name, 0))
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return _inner(tp).parse(datetime.timedelta(milliseconds=_MS.get(name, 0)))
    if kafka_type == "bool":
        return False
    if kafka_type == "float64":  # AlterClientQuotas' quota values
        return _inner(tp)(1000.0)
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type == "bytes":
        return b"fz"
    if kafka_type == "records":
        return Records(record_batch)
    if kafka_type == "string":
        if name in _TOPIC_FIELDS:
            return _TOPIC_OF_API.get(api_key, TOPIC)
        if name in _GROUP_FIELDS:
            return GROUP
        return "" if name == "member_id" else "fz"
    raise ValueError(f"no sample for {kafka_type} ({name})")


def sample(cls: Any, api_key: int, record_batch: bytes) -> Any:
    """An instance of kio entity `cls`: every field set (tagged ones too), arrays of one."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        match kind:
            case EntityTupleField(inner):
                values[f.name] = (sample(inner, api_key, record_batch),)
            case EntityField(inner):
                values[f.name] = sample(inner, api_key, record_batch)
            case PrimitiveTupleField():
                values[f.name] = (_primitive(get_schema_field_type(f), f.name, api_key,
                                             f.type, record_batch),)
            case PrimitiveField():
                values[f.name] = _primitive(get_schema_field_type(f), f.name, api_key, f.type,
                                            record_batch)
    return cls(**values)


def encode_request(api_key: int, version: int, request: Any, correlation_id: int = 1) -> bytes:
    """kio's encoding of `request` behind its request header (client id "fuzz"): what the
    server decodes, without the size prefix (`framed` adds it)."""
    header_cls = load_request_schema(api_key, version).__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(request_api_key=i16(api_key),
                                              request_api_version=i16(version),
                                              correlation_id=i32(correlation_id),
                                              client_id="fuzz"))
    entity_writer(type(request))(buf, request)
    return buf.getvalue()


@functools.cache
def sample_body(api_key: int, version: int) -> bytes:
    """A valid request of this API version (header included, size prefix not): kio's
    encoding of `sample`, correlation id 1, client id "fuzz"."""
    cls = load_request_schema(api_key, version)
    return encode_request(api_key, version, sample(cls, api_key, good_batch([b"fuzz"])))


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


# ------------------------------------------------------------------ finding the lengths

class _Scan:
    """Walks kio-encoded bytes of one entity class, noting every length field."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.found: list[Length] = []

    def note(self, start: int, end: int, kind: str, path: str) -> None:
        self.found.append(Length(start, end, kind, path))

    def entity(self, cls: Any, pos: int, path: str) -> int:
        flexible = bool(cls.__flexible__)
        header = cls.__name__ == "RequestHeader"
        tagged: dict[int, dataclasses.Field[Any]] = {}
        for f in dataclasses.fields(cls):
            field_tag = get_field_tag(f)
            if field_tag is not None:
                tagged[int(field_tag)] = f
                continue
            pos = self.field(f, pos, flexible, f"{path}.{f.name}",
                             legacy_string=header and f.name == "client_id")
        if not flexible:
            return pos
        count, end = _read_uvarint(self.buf, pos)
        self.note(pos, end, "tags", f"{path}.<tags>")
        pos = end
        for _ in range(count):
            tag, pos = _read_uvarint(self.buf, pos)
            size, end = _read_uvarint(self.buf, pos)
            self.note(pos, end, "tagsize", f"{path}.<tag {tag}>")
            field = tagged[tag]
            done = self.field(field, end, True, f"{path}.{field.name}", tagged=True)
            assert done == end + size, (path, field.name)
            pos = done
        return pos

    def field(self, f: dataclasses.Field[Any], pos: int, flexible: bool, path: str, *,
              legacy_string: bool = False, tagged: bool = False) -> int:
        kind = classify_field(f)
        if kind.is_array:
            pos, n = self.length(pos, flexible, 4, path)
            for i in range(max(n, 0)):
                pos = self.value(f, kind, pos, flexible, f"{path}[{i}]")
            return pos
        return self.value(f, kind, pos, flexible, path, legacy_string=legacy_string,
                          tagged=tagged)

    def value(self, f: dataclasses.Field[Any], kind: Any, pos: int, flexible: bool,
              path: str, *, legacy_string: bool = False, tagged: bool = False) -> int:
        if isinstance(kind, EntityField | EntityTupleField):
            if isinstance(kind, EntityField) and is_optional(f) and not tagged:
                pos += 1  # KIP-893's presence marker
            return self.entity(kind.type_, pos, path)
        kafka_type = get_schema_field_type(f)
        fixed = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "bool": 1, "uuid": 16,
                 "timedelta_i32": 4, "timedelta_i64": 8, "float64": 8, "uint16": 2,
                 "uint32": 4, "uint64": 8, "uint8": 1, "error_code": 2, "datetime_i64": 8}
        if kafka_type in fixed:
            return pos + fixed[kafka_type]
        width = 2 if kafka_type == "string" else 4
        pos, n = self.length(pos, flexible and not legacy_string, width, path)
        return pos + max(n, 0)

    def length(self, pos: int, compact: bool, width: int, path: str) -> tuple[int, int]:
        """Note the length at `pos`; (position after it, the length: -1 for null)."""
        if compact:
            raw, end = _read_uvarint(self.buf, pos)
            self.note(pos, end, "uvar", path)
            return end, raw - 1
        end = pos + width
        self.note(pos, end, "i16" if width == 2 else "i32", path)
        return end, int.from_bytes(self.buf[pos:end], "big", signed=True)


def walk(cls: Any, body: bytes, pos: int = 0) -> int:
    """Where kio entity `cls` encoded in `body` at `pos` ends, by its lengths alone (no
    value checked; IndexError if a length runs past the end)."""
    return _Scan(body).entity(cls, pos, cls.__name__)


@functools.cache
def length_fields(api_key: int, version: int, body: bytes | None = None
                  ) -> tuple[Length, ...]:
    """Every length field of `body`, a request of that API version (default
    `sample_body(api_key, version)`; the walk must consume it all)."""
    cls = load_request_schema(api_key, version)
    body = sample_body(api_key, version) if body is None else body
    scan = _Scan(body)
    pos = scan.entity(cls.__header_schema__, 0, "header")
    end = scan.entity(cls, pos, cls.__name__)
    assert end == len(body), f"{cls.__name__}: walked {end} of {len(body)} bytes"
    return tuple(scan.found)


def encode_length(kind: str, n: int) -> bytes:
    """Length `n` as a field of `kind` holds it (clamped to its width's extremes)."""
    if kind == "i16":
        return max(-(2**15), min(n, 2**15 - 1) if n < 2**31 else -(2**15)).to_bytes(
            2, "big", signed=True)
    if kind == "i32":
        return (n if -(2**31) <= n < 2**31 else -(2**31)).to_bytes(4, "big", signed=True)
    if kind == "uvar":
        return uvarint(max(n + 1, 0))  # compact: n + 1, null (-1) is 0
    return uvarint(max(n, 0))  # tags, tagsize: a plain count


def set_length(body: bytes, at: Length, n: int) -> bytes:
    return body[:at.start] + encode_length(at.kind, n) + body[at.end:]


# ------------------------------------------------------------------ mutants

HEAD = 8  # api key, version, correlation id: kept, so the frame reaches its API's decoder


def length_mutants(api_key: int, version: int, body: bytes | None = None) -> Iterator[Frame]:
    """Every length field of the sample request (or `body`) at every value of LENGTHS."""
    body = sample_body(api_key, version) if body is None else body
    for at in length_fields(api_key, version, body):
        for n in LENGTHS:
            yield Frame(framed(set_length(body, at, n)),
                        f"api {api_key} v{version} {at.path} ({at.kind}) = {n}")


def random_mutants(api_key: int, version: int, count: int, rng: random.Random,
                   body: bytes | None = None) -> Iterator[Frame]:
    """`count` mutants of the sample request (or `body`): truncations (the size prefix
    saying the truncated size, or the original one and the connection then closed), byte
    flips, random bodies, and several length fields changed at once."""
    body = sample_body(api_key, version) if body is None else body
    lengths = length_fields(api_key, version, body)
    name = f"api {api_key} v{version}"
    for _ in range(count):
        how = rng.randrange(5)
        if how == 0:
            cut = rng.randrange(HEAD, len(body)) if len(body) > HEAD else len(body)
            yield Frame(framed(body[:cut]), f"{name} truncated at {cut}")
        elif how == 1:
            cut = rng.randrange(HEAD, len(body)) if len(body) > HEAD else len(body)
            yield Frame(framed(body)[:4 + cut], f"{name} cut at {cut} of {len(body)}")
        elif how == 2:
            out = bytearray(body)
            for _ in range(rng.randint(1, 4)):
                if len(out) > HEAD:
                    out[rng.randrange(HEAD, len(out))] ^= 1 << rng.randrange(8)
            yield Frame(framed(bytes(out)), f"{name} bits flipped")
        elif how == 3:
            tail = rng.randbytes(rng.randrange(0, 200))
            yield Frame(framed(body[:HEAD] + tail), f"{name} random body")
        else:
            out_b = body
            for at in sorted(rng.sample(lengths, min(len(lengths), rng.randint(2, 3))),
                             key=lambda x: -x.start):  # from the end: positions stay valid
                out_b = set_length(out_b, at, rng.choice((*LENGTHS, rng.randrange(2**20))))
            yield Frame(framed(out_b), f"{name} lengths changed")


def every_truncation(api_key: int, version: int, body: bytes | None = None
                     ) -> Iterator[Frame]:
    """The sample request (or `body`) truncated at every point after its API key and
    version."""
    body = sample_body(api_key, version) if body is None else body
    for cut in range(4, len(body)):
        yield Frame(framed(body[:cut]), f"api {api_key} v{version} truncated at {cut}")


def mutants(api_key: int, version: int, trials: int, rng: random.Random,
            every_cut: bool, body: bytes | None = None) -> Iterator[Frame]:
    """A request's mutants: its length mutants, `trials` random ones and (`every_cut`)
    every truncation; of the sample request, or of `body`."""
    yield from length_mutants(api_key, version, body)
    yield from random_mutants(api_key, version, trials, rng, body)
    if every_cut:
        yield from every_truncation(api_key, version, body)


# ------------------------------------------------------------------ record batches

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # baseOffset .. recordCount: 61 bytes
CRC_FROM = 21  # the CRC32C covers attributes to the end
MAGIC_AT = 16


def record(offset_delta: int, key: bytes | None, value: bytes | None,
           headers: tuple[tuple[bytes, bytes | None], ...] = (), *, ts_delta: int = 0,
           length: int | None = None, key_len: int | None = None,
           value_len: int | None = None, header_count: int | None = None,
           header_key_len: int | None = None, header_value_len: int | None = None) -> bytes:
    """One record's bytes; any of its lengths may be given instead of the true one."""
    body = bytearray(b"\x00")  # attributes
    body += varint(ts_delta) + varint(offset_delta)
    body += varint(key_len if key_len is not None else -1 if key is None else len(key))
    body += key or b""
    body += varint(value_len if value_len is not None else -1 if value is None else len(value))
    body += value or b""
    body += varint(header_count if header_count is not None else len(headers))
    for hk, hv in headers:
        body += varint(header_key_len if header_key_len is not None else len(hk)) + hk
        body += varint(header_value_len if header_value_len is not None
                       else -1 if hv is None else len(hv))
        body += hv or b""
    return varint(length if length is not None else len(body)) + bytes(body)


def batch(records: bytes, count: int, *, last_offset_delta: int | None = None,
          attributes: int = 0, producer_id: int = -1, producer_epoch: int = -1,
          base_sequence: int = -1, magic: int = 2, crc: int | None = None,
          length_delta: int = 0) -> bytes:
    """A record batch around `records` (already encoded, compressed if `attributes` says
    so) declaring `count` records; the CRC32C is computed unless `crc` is given."""
    import crc32c

    lod = count - 1 if last_offset_delta is None else last_offset_delta
    head = BATCH_HEADER.pack(0, 49 + len(records) + length_delta, -1, magic, 0, attributes,
                             lod, 1_700_000_000_000, 1_700_000_000_000, producer_id,
                             producer_epoch, base_sequence, count)
    out = bytearray(head + records)
    struct.pack_into(">I", out, 17, crc if crc is not None
                     else crc32c.crc32c(bytes(out[CRC_FROM:])))
    return bytes(out)


def good_batch(values: list[bytes], **kw: Any) -> bytes:
    recs = b"".join(record(i, b"k", v) for i, v in enumerate(values))
    return batch(recs, len(values), **kw)


CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def compress(codec: str, data: bytes) -> bytes:
    import cramjam

    match codec:
        case "gzip":
            return bytes(cramjam.gzip.compress(data))
        case "snappy":
            return bytes(cramjam.snappy.compress_raw(data))
        case "lz4":
            return bytes(cramjam.lz4.compress(data))
        case _:
            return bytes(cramjam.zstd.compress(data))


def bad_batches(producer_id: int = -1, producer_epoch: int = -1) -> dict[str, bytes]:
    """Issue 22's malformed batches by kind, each with a valid CRC (but `bad crc`), so it is
    judged on its content. `producer_id`/`producer_epoch`: a real producer's, for the
    idempotent one with baseSequence -1."""
    three = [record(i, b"k", b"v%d" % i) for i in range(3)]
    recs = b"".join(three)
    hdr = ((b"h", b"x"),)
    out = {
        "count 2^31-1": batch(recs, 2**31 - 1),
        "count 10^6": batch(recs, 10**6),
        "extra records": batch(recs, 2),
        "missing records": batch(recs, 5),
        "negative record length": batch(record(0, b"k", b"v", length=-3), 1),
        "record length 2^31-1": batch(record(0, b"k", b"v", length=2**31 - 1), 1),
        "record length short": batch(record(0, b"k", b"vvvv", length=4), 1),
        "negative key length": batch(record(0, b"k", b"v", key_len=-5), 1),
        "key length past the batch": batch(record(0, b"k", b"v", key_len=1000), 1),
        "negative value length": batch(record(0, b"k", b"v", value_len=-7), 1),
        "negative header count": batch(record(0, b"k", b"v", header_count=-2), 1),
        "header count 10^6": batch(record(0, b"k", b"v", hdr, header_count=10**6), 1),
        "negative header key length": batch(record(0, b"k", b"v", hdr, header_key_len=-1), 1),
        "negative header value length": batch(record(0, b"k", b"v", hdr,
                                                     header_value_len=-9), 1),
        "offset deltas out of order": batch(record(0, b"k", b"a") + record(5, b"k", b"b")
                                            + record(1, b"k", b"c"), 3),
        "negative offset delta": batch(record(-1, b"k", b"a") + record(0, b"k", b"b"), 2),
        "lastOffsetDelta != count-1": batch(recs, 3, last_offset_delta=10),
        "lastOffsetDelta 2^31-1": batch(recs, 3, last_offset_delta=2**31 - 1),
        "trailing bytes": batch(recs + b"\x00\x01\x02", 3),
        "overlong varint": batch(b"\xff" * 11 + recs, 3),
        "empty batch": batch(b"", 0),
        "bad magic 1": batch(recs, 3, magic=1),
        "bad magic 3": batch(recs, 3, magic=3),
        "bad crc": batch(recs, 3, crc=0x12345678),
        "batch length past the bytes": batch(recs, 3, length_delta=100),
        "control batch": batch(recs, 3, attributes=0x20),
        "idempotent baseSequence -1": batch(recs, 3, producer_id=producer_id,
                                            producer_epoch=producer_epoch, base_sequence=-1),
        "idempotent epoch -1": batch(recs, 3, producer_id=producer_id, producer_epoch=-1,
                                     base_sequence=0),
        "LogAppendTime set by the producer": batch(recs, 3, attributes=0x08),
        "codec id 6": batch(recs, 3, attributes=6),
    }
    rng = random.Random(22)
    for codec, bits in CODECS.items():
        out[f"{codec} garbage"] = batch(rng.randbytes(64), 3, attributes=bits)
        whole = compress(codec, recs * 20)
        out[f"{codec} truncated"] = batch(whole[:len(whole) // 2], 60, attributes=bits)
        out[f"{codec} count 10^6 inside"] = batch(compress(codec, recs), 10**6,
                                                  attributes=bits)
        out[f"{codec} negative length inside"] = batch(
            compress(codec, record(0, b"k", b"v", value_len=-7)), 1, attributes=bits)
    return out


def produce_request(version: int, topic: str, partition: int, records: bytes, acks: int = -1,
                    correlation: int = 1) -> bytes:
    """A framed Produce request of `version` carrying `records` to one partition."""
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    mod = load_payload_module(0, version, EntityType.request)
    cls = mod.ProduceRequest
    part = mod.PartitionProduceData(index=i32(partition), records=Records(records))
    topic_data = mod.TopicProduceData(name=topic, partition_data=(part,))
    ms = cls.__dataclass_fields__["timeout"].type
    req = cls(transactional_id=None, acks=i16(acks),
              timeout=_inner(ms).parse(datetime.timedelta(seconds=10)),
              topic_data=(topic_data,))
    return framed(encode_request(0, version, req, correlation))
