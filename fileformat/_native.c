/* fileformat._native: the compiled hot loops over Kafka record batches.
 *
 * Pure functions over byte buffers (no I/O, no allocation kept across calls but a
 * BatchEncoder's batch); every function has a pure-Python twin in fileformat that tests
 * run on the same inputs. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Bumped when a function's contract changes, so a stale build is refused at import. */
#define NATIVE_ABI 6

/* ==== encoder (ingest) ==== */
#include <stdint.h>
#include <string.h>

/* The produce path's record encoder: Kafka RecordBatch v2, uncompressed, built in place.
 *
 * crc32c(data, crc=0) -> int: CRC32C (Castagnoli) continued from `crc`, with SSE4.2's
 * crc32 instruction when the CPU has it, else slicing-by-8 tables (crc32c_portable: the
 * tables always). The twin is the crc32c package.
 *
 * BatchEncoder(): appends records (offset delta, timestamp, key, value, headers) to one
 * batch's records section with Kafka's zigzag varints, and `finish(base_offset)` writes the
 * 61-byte header (leaderEpoch -1, attributes 0, producer id/epoch/sequence -1, as aiokafka's
 * builder) and its CRC32C, returning the batch as bytes without copying it: the records
 * are written into a bytes object that grows by doubling and is handed over at the end.
 * A failed append leaves the encoder unchanged; a failed finish (out of memory) empties it.
 * The twin is fileformat.encoder.BatchEncoderReference; tests hold both to the same bytes. */

#define ENC_HEADER_SIZE 61
#define ENC_LOG_OVERHEAD 12
#define ENC_ATTRIBUTES_POS 21
#define ENC_CRC_POS 17
#define ENC_MIN_CAPACITY 1024

static uint32_t enc_crc_table[8][256];

static void enc_crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) {
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        }
        enc_crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        for (int t = 1; t < 8; t++) {
            uint32_t c = enc_crc_table[t - 1][n];
            enc_crc_table[t][n] = (c >> 8) ^ enc_crc_table[0][c & 0xFF];
        }
    }
}

/* Raw (not inverted) CRC32C update, slicing by 8. */
static uint32_t enc_crc_sw(uint32_t crc, const unsigned char *p, size_t n) {
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        w ^= crc;
        crc = enc_crc_table[7][w & 0xFF] ^ enc_crc_table[6][(w >> 8) & 0xFF] ^
              enc_crc_table[5][(w >> 16) & 0xFF] ^ enc_crc_table[4][(w >> 24) & 0xFF] ^
              enc_crc_table[3][(w >> 32) & 0xFF] ^ enc_crc_table[2][(w >> 40) & 0xFF] ^
              enc_crc_table[1][(w >> 48) & 0xFF] ^ enc_crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) {
        crc = (crc >> 8) ^ enc_crc_table[0][(crc ^ *p++) & 0xFF];
    }
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ENC_HAVE_HW_CRC 1
__attribute__((target("sse4.2"))) static uint32_t enc_crc_hw(uint32_t crc,
                                                             const unsigned char *p,
                                                             size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) {
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    }
    return c32;
}
#endif

static int enc_hw_crc;

static uint32_t enc_crc32c(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
#ifdef ENC_HAVE_HW_CRC
    if (enc_hw_crc) {
        return ~enc_crc_hw(crc, p, n);
    }
#endif
    return ~enc_crc_sw(crc, p, n);
}

static void enc_init(void) {
    enc_crc_init();
#ifdef ENC_HAVE_HW_CRC
    __builtin_cpu_init();
    enc_hw_crc = __builtin_cpu_supports("sse4.2");
#endif
}

/* crc32c and crc32c_portable (the table path whatever the CPU, so tests cover it). */
static PyObject *enc_crc_call(PyObject *const *args, Py_ssize_t nargs, int portable) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32c(data, crc=0) takes 1 or 2 arguments");
        return NULL;
    }
    unsigned long crc = 0;
    if (nargs == 2) {
        crc = PyLong_AsUnsignedLong(args[1]);
        if (crc == (unsigned long)-1 && PyErr_Occurred()) {
            return NULL;
        }
        if (crc > 0xFFFFFFFFul) {
            PyErr_SetString(PyExc_ValueError, "crc must be a 32-bit unsigned integer");
            return NULL;
        }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    uint32_t out;
    if (portable) {
        out = ~enc_crc_sw(~(uint32_t)crc, view.buf, (size_t)view.len);
    } else if (view.len >= 65536) {
        Py_BEGIN_ALLOW_THREADS
        out = enc_crc32c((uint32_t)crc, view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    } else {
        out = enc_crc32c((uint32_t)crc, view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(out);
}

static PyObject *native_crc32c(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return enc_crc_call(args, nargs, 0);
}

static PyObject *native_crc32c_portable(PyObject *self, PyObject *const *args,
                                        Py_ssize_t nargs) {
    (void)self;
    return enc_crc_call(args, nargs, 1);
}

/* Bytes of Kafka's zigzag varint (varlong) of v. */
static Py_ssize_t enc_varint_size(int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    Py_ssize_t n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static unsigned char *enc_varint(unsigned char *p, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        *p++ = (unsigned char)(z | 0x80);
        z >>= 7;
    }
    *p++ = (unsigned char)z;
    return p;
}

static void enc_be64(unsigned char *p, uint64_t v) {
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)v;
        v >>= 8;
    }
}

static void enc_be32(unsigned char *p, uint32_t v) {
    for (int i = 3; i >= 0; i--) {
        p[i] = (unsigned char)v;
        v >>= 8;
    }
}

/* A key, value or header value: bytes-like or None (data NULL, len -1). */
typedef struct {
    const char *data;
    Py_ssize_t len;
    Py_buffer view;
    int held;
} EncBlob;

static int enc_blob(PyObject *obj, EncBlob *b, const char *what) {
    b->held = 0;
    if (obj == Py_None) {
        b->data = NULL;
        b->len = -1;
        return 0;
    }
    if (PyBytes_CheckExact(obj)) {
        b->data = PyBytes_AS_STRING(obj);
        b->len = PyBytes_GET_SIZE(obj);
    } else {
        if (PyUnicode_Check(obj) || PyObject_GetBuffer(obj, &b->view, PyBUF_SIMPLE) < 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "record %s must be bytes-like or None, not %.100s",
                         what, Py_TYPE(obj)->tp_name);
            return -1;
        }
        b->held = 1;
        b->data = b->view.buf;
        b->len = b->view.len;
    }
    if (b->len > INT32_MAX) {
        if (b->held) {
            PyBuffer_Release(&b->view);
            b->held = 0;
        }
        PyErr_Format(PyExc_ValueError, "record %s longer than 2**31 - 1 bytes", what);
        return -1;
    }
    return 0;
}

static void enc_blob_release(EncBlob *b) {
    if (b->held) {
        PyBuffer_Release(&b->view);
        b->held = 0;
    }
}

static Py_ssize_t enc_blob_size(const EncBlob *b) {
    return b->len < 0 ? 1 : enc_varint_size(b->len) + b->len;
}

static unsigned char *enc_blob_write(unsigned char *p, const EncBlob *b) {
    p = enc_varint(p, b->len);
    if (b->len > 0) {
        memcpy(p, b->data, (size_t)b->len);
        p += b->len;
    }
    return p;
}

typedef struct {
    PyObject_HEAD
    PyObject *buf;         /* bytes being filled (refcount 1, never shared), or NULL */
    Py_ssize_t len;        /* bytes used in buf, the 61 header bytes included */
    Py_ssize_t count;      /* records appended */
    int64_t last_delta;    /* offset delta of the last record */
    int64_t first_ts;
    int64_t min_ts;
    int64_t max_ts;
} EncBatchEncoder;

static void enc_reset(EncBatchEncoder *e) {
    e->len = ENC_HEADER_SIZE;
    e->count = 0;
    e->last_delta = -1;
    e->first_ts = e->min_ts = e->max_ts = -1;
}

static PyObject *enc_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "BatchEncoder() takes no arguments");
        return NULL;
    }
    EncBatchEncoder *e = (EncBatchEncoder *)type->tp_alloc(type, 0);
    if (e != NULL) {
        e->buf = NULL;
        enc_reset(e);
    }
    return (PyObject *)e;
}

static void enc_dealloc(EncBatchEncoder *e) {
    Py_CLEAR(e->buf);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

/* Make room for `more` bytes after e->len. */
static int enc_reserve(EncBatchEncoder *e, Py_ssize_t more) {
    if (more > PY_SSIZE_T_MAX / 2 - e->len || e->len + more - ENC_LOG_OVERHEAD > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "record batch would exceed 2**31 - 1 bytes");
        return -1;
    }
    Py_ssize_t need = e->len + more;
    if (e->buf == NULL) {
        Py_ssize_t cap = need < ENC_MIN_CAPACITY ? ENC_MIN_CAPACITY : need;
        e->buf = PyBytes_FromStringAndSize(NULL, cap);
        return e->buf == NULL ? -1 : 0;
    }
    Py_ssize_t cap = PyBytes_GET_SIZE(e->buf);
    if (need <= cap) {
        return 0;
    }
    while (cap < need) {
        cap *= 2;
    }
    /* A new object and a copy (not _PyBytes_Resize, which frees the old one when it
     * fails): a failed growth leaves the records appended so far as they were. */
    PyObject *bigger = PyBytes_FromStringAndSize(NULL, cap);
    if (bigger == NULL) {
        return -1;
    }
    memcpy(PyBytes_AS_STRING(bigger), PyBytes_AS_STRING(e->buf), (size_t)e->len);
    Py_SETREF(e->buf, bigger);
    return 0;
}

/* append(offset_delta, timestamp, key, value, headers=()) -> int: the batch's size in bytes
 * so far (header included). Offset deltas must rise; timestamps are absolute (stored as
 * deltas from the first record's). */
static PyObject *enc_append(EncBatchEncoder *e, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 4 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError,
                        "append(offset_delta, timestamp, key, value, headers=()) takes 4 or 5"
                        " arguments");
        return NULL;
    }
    long long delta = PyLong_AsLongLong(args[0]);
    if (delta == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long long ts = PyLong_AsLongLong(args[1]);
    if (ts == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (delta <= e->last_delta || delta > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "offset deltas must increase within 0..2**31 - 1: %lld"
                     " after %lld", delta, (long long)e->last_delta);
        return NULL;
    }
    int64_t ts_delta = 0;
    if (e->count && __builtin_sub_overflow((int64_t)ts, e->first_ts, &ts_delta)) {
        PyErr_SetString(PyExc_ValueError, "timestamp delta does not fit in 64 bits");
        return NULL;
    }
    PyObject *headers = nargs == 5 ? args[4] : NULL;
    PyObject *hseq = NULL;
    Py_ssize_t nh = 0;
    if (headers != NULL && headers != Py_None) {
        hseq = PySequence_Fast(headers, "record headers must be a sequence of (str, bytes)");
        if (hseq == NULL) {
            return NULL;
        }
        nh = PySequence_Fast_GET_SIZE(hseq);
    }
    EncBlob key, value;
    if (enc_blob(args[2], &key, "key") < 0) {
        Py_XDECREF(hseq);
        return NULL;
    }
    if (enc_blob(args[3], &value, "value") < 0) {
        enc_blob_release(&key);
        Py_XDECREF(hseq);
        return NULL;
    }
    PyObject *result = NULL;
    /* Pass 1: the body's size (checking every header). */
    Py_ssize_t body = 1 + enc_varint_size(ts_delta) + enc_varint_size(delta) +
                      enc_blob_size(&key) + enc_blob_size(&value) + enc_varint_size(nh);
    for (Py_ssize_t i = 0; i < nh; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(hseq, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
            !PyUnicode_Check(PyTuple_GET_ITEM(item, 0))) {
            PyErr_SetString(PyExc_TypeError, "a record header must be a (str, bytes | None) tuple");
            goto done;
        }
        Py_ssize_t klen;
        if (PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(item, 0), &klen) == NULL) {
            goto done;
        }
        EncBlob hv;
        if (enc_blob(PyTuple_GET_ITEM(item, 1), &hv, "header value") < 0) {
            goto done;
        }
        body += enc_varint_size(klen) + klen + enc_blob_size(&hv);
        enc_blob_release(&hv);
    }
    Py_ssize_t reserved = enc_varint_size(body) + body;
    if (enc_reserve(e, reserved) < 0) {
        goto done;
    }
    /* Pass 2: write it. Only a header value whose length changed since pass 1 (an exotic
     * buffer) can fail here; the bytes written past e->len are then simply not kept. */
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(e->buf) + e->len;
    unsigned char *end = p + reserved;
    p = enc_varint(p, body);
    *p++ = 0; /* attributes */
    p = enc_varint(p, ts_delta);
    p = enc_varint(p, delta);
    p = enc_blob_write(p, &key);
    p = enc_blob_write(p, &value);
    p = enc_varint(p, nh);
    for (Py_ssize_t i = 0; i < nh; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(hseq, i);
        Py_ssize_t klen;
        const char *k = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(item, 0), &klen);
        p = enc_varint(p, klen);
        memcpy(p, k, (size_t)klen);
        p += klen;
        EncBlob hv;
        if (enc_blob(PyTuple_GET_ITEM(item, 1), &hv, "header value") < 0) {
            goto done;
        }
        if (enc_blob_size(&hv) > end - p) {
            enc_blob_release(&hv);
            PyErr_SetString(PyExc_RuntimeError, "a record header changed during append");
            goto done;
        }
        p = enc_blob_write(p, &hv);
        enc_blob_release(&hv);
    }
    if (p != end) {
        PyErr_SetString(PyExc_RuntimeError, "a record header changed during append");
        goto done;
    }
    e->len = (Py_ssize_t)(p - (unsigned char *)PyBytes_AS_STRING(e->buf));
    if (e->count == 0) {
        e->first_ts = e->min_ts = e->max_ts = ts;
    } else if (ts < e->min_ts) {
        e->min_ts = ts;
    } else if (ts > e->max_ts) {
        e->max_ts = ts;
    }
    e->count++;
    e->last_delta = delta;
    result = PyLong_FromSsize_t(e->len);
done:
    enc_blob_release(&key);
    enc_blob_release(&value);
    Py_XDECREF(hseq);
    return result;
}

/* finish(base_offset=0) -> bytes: the whole batch; the encoder is then empty again. */
static PyObject *enc_finish(EncBatchEncoder *e, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "finish(base_offset=0) takes at most 1 argument");
        return NULL;
    }
    long long base = 0;
    if (nargs == 1) {
        base = PyLong_AsLongLong(args[0]);
        if (base == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    if (e->count == 0) {
        PyErr_SetString(PyExc_ValueError, "a batch needs at least one record");
        return NULL;
    }
    if (e->count > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a batch holds at most 2**31 - 1 records");
        return NULL;
    }
    if (_PyBytes_Resize(&e->buf, e->len) < 0) {  /* frees the records: the batch is lost */
        enc_reset(e);
        return NULL;
    }
    unsigned char *h = (unsigned char *)PyBytes_AS_STRING(e->buf);
    enc_be64(h, (uint64_t)base);                                   /* baseOffset */
    enc_be32(h + 8, (uint32_t)(e->len - ENC_LOG_OVERHEAD));         /* length */
    enc_be32(h + 12, 0xFFFFFFFFu);                                  /* leaderEpoch -1 */
    h[16] = 2;                                                      /* magic */
    h[21] = 0;                                                      /* attributes */
    h[22] = 0;
    enc_be32(h + 23, (uint32_t)e->last_delta);                      /* lastOffsetDelta */
    enc_be64(h + 27, (uint64_t)e->first_ts);                        /* firstTimestamp */
    enc_be64(h + 35, (uint64_t)e->max_ts);                          /* maxTimestamp */
    memset(h + 43, 0xFF, 8 + 2 + 4);            /* producerId, producerEpoch, baseSequence */
    enc_be32(h + 57, (uint32_t)e->count);                           /* recordCount */
    enc_be32(h + ENC_CRC_POS,
             enc_crc32c(0, h + ENC_ATTRIBUTES_POS, (size_t)(e->len - ENC_ATTRIBUTES_POS)));
    PyObject *out = e->buf;
    e->buf = NULL;
    enc_reset(e);
    return out;
}

static PyObject *enc_get_count(EncBatchEncoder *e, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(e->count);
}

static PyObject *enc_get_size(EncBatchEncoder *e, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(e->len);
}

static PyObject *enc_get_min_ts(EncBatchEncoder *e, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(e->min_ts);
}

static PyObject *enc_get_max_ts(EncBatchEncoder *e, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(e->max_ts);
}

static PyObject *enc_get_last_delta(EncBatchEncoder *e, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(e->last_delta);
}

static PyMethodDef enc_methods[] = {
    {"append", (PyCFunction)(void (*)(void))enc_append, METH_FASTCALL,
     "append(offset_delta, timestamp, key, value, headers=()) -> batch size in bytes"},
    {"finish", (PyCFunction)(void (*)(void))enc_finish, METH_FASTCALL,
     "finish(base_offset=0) -> the batch as bytes (with its CRC); the encoder is emptied"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef enc_getset[] = {
    {"record_count", (getter)enc_get_count, NULL, "records appended since the last finish", NULL},
    {"size", (getter)enc_get_size, NULL, "bytes the batch would have now (61 when empty)", NULL},
    {"min_timestamp", (getter)enc_get_min_ts, NULL, "smallest timestamp (-1 when empty)", NULL},
    {"max_timestamp", (getter)enc_get_max_ts, NULL, "largest timestamp (-1 when empty)", NULL},
    {"last_offset_delta", (getter)enc_get_last_delta, NULL,
     "offset delta of the last record (-1 when empty)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject EncBatchEncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fileformat._native.BatchEncoder",
    .tp_doc = "Builds one uncompressed Kafka RecordBatch v2 record by record.",
    .tp_basicsize = sizeof(EncBatchEncoder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = enc_new,
    .tp_dealloc = (destructor)enc_dealloc,
    .tp_methods = enc_methods,
    .tp_getset = enc_getset,
};

/* Called from PyInit__native: tables, CPU check, the type. */
static int enc_module_init(PyObject *m) {
    enc_init();
    if (PyType_Ready(&EncBatchEncoderType) < 0) {
        return -1;
    }
    Py_INCREF(&EncBatchEncoderType);
    if (PyModule_AddObject(m, "BatchEncoder", (PyObject *)&EncBatchEncoderType) < 0) {
        Py_DECREF(&EncBatchEncoderType);
        return -1;
    }
    return 0;
}

/* ==== end encoder ==== */

/* ==== filter (compaction walk) ==== */
/* filter_records(batch, start, mask) -> (out, kept, last_offset_delta, max_timestamp_delta)
 *
 * `batch` is an UNCOMPRESSED record batch whose records section starts at byte `start`
 * (the 61-byte header) and runs to its end; `mask` holds one byte per record (non-zero:
 * keep), len(mask) records are expected. Every record's length prefix is walked (the
 * records must frame the section exactly); the kept records' timestampDelta and
 * offsetDelta are parsed and their bytes copied as they are (runs of consecutive kept
 * records in one copy). `out` is a new bytearray: batch[:start] (the old header, for the
 * caller to rewrite) followed by the kept records. With nothing kept, the deltas are 0.
 * Corrupt framing raises ValueError; the twin is fileformat.filter._filter_records_py. */

/* Kafka's zigzag varint/varlong at p[*pos] (at most 10 bytes, none at or past `end`). */
static int filter_varint(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end,
                         int64_t *value) {
    uint64_t raw = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*pos >= end) {
            return -1;
        }
        unsigned char b = p[(*pos)++];
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *value = (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
            return 0;
        }
    }
    return -1;
}

static PyObject *filter_corrupt(const char *what, Py_ssize_t record) {
    PyErr_Format(PyExc_ValueError, "record %zd: %s", record, what);
    return NULL;
}

static PyObject *native_filter_records(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer batch, mask;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "y*ny*", &batch, &start, &mask)) {
        return NULL;
    }
    PyObject *out = NULL, *result = NULL;
    const unsigned char *p = batch.buf;
    const unsigned char *keep = mask.buf;
    Py_ssize_t end = batch.len, n = mask.len;
    if (start < 0 || start > end) {
        PyErr_SetString(PyExc_ValueError, "records section starts outside the batch");
        goto done;
    }
    /* Worst case everything is kept: shrunk to size at the end (a realloc). */
    out = PyByteArray_FromStringAndSize(NULL, end);
    if (out == NULL) {
        goto done;
    }
    unsigned char *dst = (unsigned char *)PyByteArray_AS_STRING(out);
    memcpy(dst, p, (size_t)start);
    Py_ssize_t written = start, pos = start, run = -1, kept = 0;
    int64_t last_delta = 0, max_ts = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t at = pos;
        int64_t size;
        if (filter_varint(p, &pos, end, &size) < 0) {
            filter_corrupt("length prefix runs past the batch or exceeds 10 bytes", i);
            goto fail;
        }
        if (size < 0 || size > end - pos) {
            filter_corrupt("length is negative or runs past the batch", i);
            goto fail;
        }
        Py_ssize_t rec_end = pos + (Py_ssize_t)size;
        if (keep[i]) {
            int64_t ts, delta;
            Py_ssize_t q = pos + 1; /* past the attributes byte */
            if (q > rec_end || filter_varint(p, &q, rec_end, &ts) < 0
                    || filter_varint(p, &q, rec_end, &delta) < 0) {
                filter_corrupt("timestamp or offset delta runs past the record", i);
                goto fail;
            }
            if (kept == 0 || ts > max_ts) {
                max_ts = ts;
            }
            last_delta = delta;
            kept++;
            if (run < 0) {
                run = at;
            }
        } else if (run >= 0) {
            memcpy(dst + written, p + run, (size_t)(at - run));
            written += at - run;
            run = -1;
        }
        pos = rec_end;
    }
    if (pos != end) {
        PyErr_Format(PyExc_ValueError, "%zd records do not frame the records section", n);
        goto fail;
    }
    if (run >= 0) {
        memcpy(dst + written, p + run, (size_t)(pos - run));
        written += pos - run;
    }
    if (PyByteArray_Resize(out, written) < 0) {
        goto fail;
    }
    result = Py_BuildValue("(NnLL)", out, kept, (long long)last_delta, (long long)max_ts);
    out = NULL; /* stolen by "N" (released by Py_BuildValue on failure too) */
    goto done;
fail:
    Py_CLEAR(out);
done:
    PyBuffer_Release(&batch);
    PyBuffer_Release(&mask);
    return result;
}
/* ==== end filter ==== */

/* ==== validate (produce admission) ==== */
/* validate_records(batch, start, count, null_keys) -> (max_timestamp_delta, indexes)
 *
 * Walks the `count` records of an UNCOMPRESSED records section, batch[start:], as Kafka's
 * DefaultRecord.readFrom reads them, and checks what a producer's batch must hold: every
 * record's length prefix (an int32 varint, at most 5 bytes) spans its body exactly;
 * inside it an attributes byte, a timestampDelta varlong, an offsetDelta varint equal to
 * the record's index (0, 1, ... as every client writes them: stored offsets are
 * baseOffset + index), key and value lengths >= -1 (-1: null), a header count >= 0 and
 * per header a key length >= 0 and a value length >= -1, each length inside the record;
 * and the `count` records fill the section exactly. Returns the largest timestampDelta
 * and, if `null_keys`, the indexes of the records with a null key (a list), else None.
 * A violation raises ValueError(kind, message): kind 1 a record's framing, 2 an
 * offsetDelta, 3 the record count against the bytes. Nothing is allocated per record.
 * The twin is fileformat.validate._validate_records_py. */

#define VAL_FRAMING 1
#define VAL_OFFSET_DELTA 2
#define VAL_COUNT 3

/* Kafka's int32 zigzag varint (ByteUtils.readVarint): at most 5 bytes, the 5th without
 * its continuation bit; bits past 32 are dropped, as Java's int arithmetic does. */
static int val_varint32(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end,
                        int32_t *value) {
    uint32_t raw = 0;
    for (int i = 0; i < 5; i++) {
        if (*pos >= end) {
            return -1;
        }
        unsigned char b = p[(*pos)++];
        raw |= (uint32_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            *value = (int32_t)((raw >> 1) ^ (~(raw & 1) + 1));
            return 0;
        }
    }
    return -1;
}

static PyObject *val_error(int kind, Py_ssize_t record, const char *what) {
    PyObject *msg = PyUnicode_FromFormat("record %zd: %s", record, what);
    if (msg != NULL) {
        PyObject *args = Py_BuildValue("(iN)", kind, msg);
        if (args != NULL) {
            PyErr_SetObject(PyExc_ValueError, args);
            Py_DECREF(args);
        }
    }
    return NULL;
}

/* A length (key, value or header value: -1 is null) and its bytes inside [*pos, end). */
static int val_blob(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end, int nullable,
                    int32_t *len) {
    if (val_varint32(p, pos, end, len) < 0 || *len < (nullable ? -1 : 0) ||
        *len > end - *pos) {
        return -1;
    }
    if (*len > 0) {
        *pos += *len;
    }
    return 0;
}

/* The walk of `native_validate_records`, shared with `check_plain_batch`: 0 if the `count`
 * records of p[start:end] are well-formed (*max_ts: the largest timestampDelta; each null
 * key's index appended to `nulls` if not NULL, or -1 returned if `no_nulls`); else the
 * violation's kind (VAL_*), with the record's index and the message in *at and *what;
 * -2 (a Python error set) if appending to `nulls` failed. */
static int val_walk(const unsigned char *p, Py_ssize_t start, Py_ssize_t end, Py_ssize_t count,
                    PyObject *nulls, int no_nulls, int64_t *max_ts, Py_ssize_t *at,
                    const char **what) {
    Py_ssize_t pos = start;
    *max_ts = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t size, delta, klen, vlen, nh, hk, hv;
        int64_t ts;
        *at = i;
        if (pos >= end) {
            *what = "missing: the records section ends before the batch's record count";
            return VAL_COUNT;
        }
        if (val_varint32(p, &pos, end, &size) < 0 || size < 0 || size > end - pos) {
            *what = "length prefix is malformed, negative or runs past the batch";
            return VAL_FRAMING;
        }
        Py_ssize_t rec_end = pos + size, q = pos + 1; /* past the attributes byte */
        if (q > rec_end || filter_varint(p, &q, rec_end, &ts) < 0 ||
            val_varint32(p, &q, rec_end, &delta) < 0) {
            *what = "timestamp or offset delta runs past the record";
            return VAL_FRAMING;
        }
        if (delta != i) {
            *what = "offsetDelta is not the record's index";
            return VAL_OFFSET_DELTA;
        }
        if (val_blob(p, &q, rec_end, 1, &klen) < 0 || val_blob(p, &q, rec_end, 1, &vlen) < 0) {
            *what = "key or value length below -1 or past the record";
            return VAL_FRAMING;
        }
        if (val_varint32(p, &q, rec_end, &nh) < 0 || nh < 0 || nh > rec_end - q) {
            *what = "header count is malformed, negative or past the record";
            return VAL_FRAMING;
        }
        for (int32_t h = 0; h < nh; h++) {
            if (val_blob(p, &q, rec_end, 0, &hk) < 0 || val_blob(p, &q, rec_end, 1, &hv) < 0) {
                *what = "header key or value length is invalid or past the record";
                return VAL_FRAMING;
            }
        }
        if (q != rec_end) {
            *what = "fields do not fill the record's length exactly";
            return VAL_FRAMING;
        }
        if (i == 0 || ts > *max_ts) {
            *max_ts = ts;
        }
        if (klen < 0) {
            if (no_nulls) {
                return -1;
            }
            if (nulls != NULL) {
                PyObject *index = PyLong_FromSsize_t(i);
                if (index == NULL || PyList_Append(nulls, index) < 0) {
                    Py_XDECREF(index);
                    return -2;
                }
                Py_DECREF(index);
            }
        }
        pos = rec_end;
    }
    if (pos != end) {
        *at = count;
        *what = "bytes remain after the batch's last record";
        return VAL_COUNT;
    }
    return 0;
}

static PyObject *native_validate_records(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer batch;
    Py_ssize_t start, count;
    int want_null;
    if (!PyArg_ParseTuple(args, "y*nnp", &batch, &start, &count, &want_null)) {
        return NULL;
    }
    PyObject *nulls = NULL, *result = NULL;
    int64_t max_ts = 0;
    Py_ssize_t at = 0;
    const char *what = NULL;
    if (start < 0 || start > batch.len || count < 0) {
        PyErr_SetString(PyExc_ValueError, "records section or count out of range");
        goto done;
    }
    if (want_null && (nulls = PyList_New(0)) == NULL) {
        goto done;
    }
    int kind = val_walk(batch.buf, start, batch.len, count, nulls, 0, &max_ts, &at, &what);
    if (kind > 0) {
        val_error(kind, at, what);
    } else if (kind == 0) {
        result = Py_BuildValue("(LO)", (long long)max_ts, nulls != NULL ? nulls : Py_None);
    }
done:
    Py_XDECREF(nulls);
    PyBuffer_Release(&batch);
    return result;
}

/* check_plain_batch(batch, null_keys) -> the 12 header fields, or None
 *
 * The produce admission's fast path: every check of fileformat.validate.check_client_batch
 * in one call, for the batch it sees most (a whole uncompressed magic-2 batch of a client,
 * neither a control batch nor LogAppendTime). Returns the header's fields as
 * fileformat.batch.HEADER reads them (length the TOTAL size, magic left out), maxTimestamp
 * replaced by the records' real largest timestamp (firstTimestamp + the largest
 * timestampDelta, wrapped as Java's long), when the batch passes every check: its length
 * is exactly the buffer's, its CRC32C holds, codec none, count >= 1 with lastOffsetDelta =
 * count - 1, producer fields consistent, every record well-formed (the validate_records
 * walk) and, if `null_keys`, no null key. None for anything else, compressed batches
 * included: the caller then makes the checks in Python, which refuse the batch with
 * Kafka's exact error or accept it (the twin is check_client_batch's own path; a test
 * holds both to the same answers). Nothing is allocated but the result. */
static int64_t val_i64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = (v << 8) | p[i];
    }
    return (int64_t)v;
}

static int32_t val_i32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}

static int16_t val_i16(const unsigned char *p) {
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

static PyObject *native_check_plain_batch(PyObject *self, PyObject *const *args,
                                          Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "check_plain_batch(batch, null_keys) takes 2 arguments");
        return NULL;
    }
    int null_keys = PyObject_IsTrue(args[1]);
    if (null_keys < 0) {
        return NULL;
    }
    Py_buffer batch;
    if (PyObject_GetBuffer(args[0], &batch, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *p = batch.buf;
    Py_ssize_t n = batch.len;
    PyObject *result;
    if (n < ENC_HEADER_SIZE || p[16] != 2 ||
        (int64_t)val_i32(p + 8) + ENC_LOG_OVERHEAD != (int64_t)n) {
        goto done; /* framing: the Python path says what is wrong */
    }
    uint32_t crc = (uint32_t)val_i32(p + ENC_CRC_POS);
    if (enc_crc32c(0, p + ENC_ATTRIBUTES_POS, (size_t)(n - ENC_ATTRIBUTES_POS)) != crc) {
        goto done;
    }
    int16_t attributes = val_i16(p + 21);
    int32_t last_delta = val_i32(p + 23), count = val_i32(p + 57), sequence = val_i32(p + 53);
    int16_t epoch = val_i16(p + 51);
    int64_t first_ts = val_i64(p + 27), producer_id = val_i64(p + 43);
    /* codec bits 0-2 none, LogAppendTime bit 3 and control bit 5 clear */
    if ((attributes & (0x07 | 0x08 | 0x20)) != 0 || count < 1 || last_delta != count - 1 ||
        (producer_id >= 0 && (epoch < 0 || sequence < 0))) {
        goto done;
    }
    int64_t max_delta;
    Py_ssize_t at;
    const char *what;
    int kind = val_walk(p, ENC_HEADER_SIZE, n, count, NULL, null_keys, &max_delta, &at, &what);
    if (kind != 0) {
        goto done;
    }
    int64_t max_ts = (int64_t)((uint64_t)first_ts + (uint64_t)max_delta);
    result = Py_BuildValue("(LniIhiLLLhii)", (long long)val_i64(p), n, (int)val_i32(p + 12),
                           (unsigned int)crc, (short)attributes, (int)last_delta,
                           (long long)first_ts, (long long)max_ts, (long long)producer_id,
                           (short)epoch, (int)sequence, (int)count);
    PyBuffer_Release(&batch);
    return result;
done:
    PyBuffer_Release(&batch);
    Py_RETURN_NONE;
}
/* ==== end validate ==== */

static PyMethodDef native_methods[] = {
    /* encoder (ingest) */
    {"crc32c", (PyCFunction)(void (*)(void))native_crc32c, METH_FASTCALL,
     "crc32c(data, crc=0) -> CRC32C of data continued from crc"},
    {"crc32c_portable", (PyCFunction)(void (*)(void))native_crc32c_portable, METH_FASTCALL,
     "crc32c computed with tables whatever the CPU (what tests check the fallback with)"},
    /* filter (compaction walk) */
    {"filter_records", native_filter_records, METH_VARARGS,
     "filter_records(batch, start, mask) -> (bytearray, kept, last_offset_delta,"
     " max_timestamp_delta): the batch's header and its records kept by mask."},
    /* validate (produce admission) */
    {"check_plain_batch", (PyCFunction)(void (*)(void))native_check_plain_batch, METH_FASTCALL,
     "check_plain_batch(batch, null_keys) -> the header's 12 fields (maxTimestamp the"
     " records' real one) if every produce check passes on an uncompressed batch, else None"},
    {"validate_records", native_validate_records, METH_VARARGS,
     "validate_records(batch, start, count, null_keys) -> (max_timestamp_delta, indexes of"
     " null keys or None): a producer's records walked; ValueError(kind, message) if bad."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "fileformat._native",
    .m_doc = "Compiled hot loops over Kafka record batches.",
    .m_size = -1,
    .m_methods = native_methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&native_module);
    if (m != NULL && (PyModule_AddIntConstant(m, "ABI", NATIVE_ABI) < 0 ||
                      enc_module_init(m) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
