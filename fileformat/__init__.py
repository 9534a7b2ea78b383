"""Pure codecs: Kafka RecordBatch v2, keyed key hashes, and the multi-partition object format.

No I/O happens here: streams are passed in as objects with `.read(n)` and writers take a
`write(bytes)` callable.
"""

from fileformat.batch import (
    WRITABLE_COMPRESSIONS,
    BatchHeader,
    Compression,
    Record,
    build_batch,
    decode_batch,
    iter_batches,
    read_header,
    verify_batch,
    with_base_offset,
)
from fileformat.errors import CorruptDataError, FormatError, TruncatedError, UnsupportedError
from fileformat.keyhash import KEY_HASH_SIZE, NULL_KEY_HASH, KeyHasher
from fileformat.objectfile import (
    FLAG_KEYED,
    FOOTER_SIZE,
    OBJECT_HEADER_SIZE,
    Chunk,
    ChunkBuilder,
    ChunkIndex,
    DataReader,
    FileLayout,
    FileWriter,
    Footer,
    Readable,
    encode_file,
    iter_chunk_records,
    iter_meta,
    meta_entry_end,
    parse_footer,
    read_object,
    verify_chunk,
)

__all__ = [
    "FLAG_KEYED",
    "FOOTER_SIZE",
    "KEY_HASH_SIZE",
    "NULL_KEY_HASH",
    "OBJECT_HEADER_SIZE",
    "WRITABLE_COMPRESSIONS",
    "BatchHeader",
    "Chunk",
    "ChunkBuilder",
    "ChunkIndex",
    "Compression",
    "CorruptDataError",
    "DataReader",
    "FileLayout",
    "FileWriter",
    "Footer",
    "FormatError",
    "KeyHasher",
    "Readable",
    "Record",
    "TruncatedError",
    "UnsupportedError",
    "build_batch",
    "decode_batch",
    "encode_file",
    "iter_batches",
    "iter_chunk_records",
    "iter_meta",
    "meta_entry_end",
    "parse_footer",
    "read_header",
    "read_object",
    "verify_batch",
    "verify_chunk",
    "with_base_offset",
]
