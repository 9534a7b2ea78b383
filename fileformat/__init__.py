"""Pure codecs: Kafka RecordBatch v2, keyed key hashes, and the multi-partition object format.

No I/O happens here: streams are passed in as objects with `.read(n)` and writers take a
`write(bytes)` callable.
"""

from fileformat.batch import (
    BatchHeader,
    Record,
    decode_batch,
    iter_batches,
    read_header,
    verify_batch,
    with_base_offset,
)
from fileformat.chunkbuilder import ChunkBuilder
from fileformat.compression import (
    PRODUCER,
    TOPIC_COMPRESSIONS,
    WRITABLE_COMPRESSIONS,
    Compression,
)
from fileformat.datareader import DataReader, chunk_batches, iter_chunk_records, verify_chunk
from fileformat.encoder import build_batch
from fileformat.errors import CorruptDataError, FormatError, TruncatedError, UnsupportedError
from fileformat.filewriter import FileWriter, encode_file
from fileformat.keyhash import KEY_HASH_SIZE, NULL_KEY_HASH, KeyHasher
from fileformat.metareader import EntryHashes, iter_meta, iter_meta_streamed
from fileformat.objectfile import (
    FLAG_KEYED,
    FOOTER_SIZE,
    OBJECT_HEADER_SIZE,
    Chunk,
    ChunkIndex,
    FileLayout,
    Footer,
    ObjectLayout,
    Sections,
    meta_entry_end,
    parse_footer,
)
from fileformat.stream import Readable
from fileformat.verify import read_object, verify_streams

__all__ = [
    "FLAG_KEYED",
    "FOOTER_SIZE",
    "KEY_HASH_SIZE",
    "NULL_KEY_HASH",
    "OBJECT_HEADER_SIZE",
    "PRODUCER",
    "TOPIC_COMPRESSIONS",
    "WRITABLE_COMPRESSIONS",
    "BatchHeader",
    "Chunk",
    "ChunkBuilder",
    "ChunkIndex",
    "Compression",
    "CorruptDataError",
    "DataReader",
    "EntryHashes",
    "FileLayout",
    "FileWriter",
    "Footer",
    "FormatError",
    "KeyHasher",
    "ObjectLayout",
    "Readable",
    "Record",
    "Sections",
    "TruncatedError",
    "UnsupportedError",
    "build_batch",
    "chunk_batches",
    "decode_batch",
    "encode_file",
    "iter_batches",
    "iter_chunk_records",
    "iter_meta",
    "iter_meta_streamed",
    "meta_entry_end",
    "parse_footer",
    "read_header",
    "read_object",
    "verify_batch",
    "verify_chunk",
    "verify_streams",
    "with_base_offset",
]
