/* fileformat._native: the compiled hot loops over Kafka record batches.
 *
 * Pure functions over byte buffers (no I/O, no allocation kept across calls); every
 * function has a pure-Python twin in fileformat that tests run on the same inputs. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Bumped when a function's contract changes, so a stale build is refused at import. */
#define NATIVE_ABI 2

/* ==== filter (compaction walk) ==== */
#include <stdint.h>
#include <string.h>

/* filter_records(batch, start, mask) -> (out, kept, last_offset_delta, max_timestamp_delta)
 *
 * `batch` is an UNCOMPRESSED record batch whose records section starts at byte `start`
 * (the 61-byte header) and runs to its end; `mask` holds one byte per record (non-zero:
 * keep), len(mask) records are expected. Every record's length prefix is walked (the
 * records must frame the section exactly); the kept records' timestampDelta and
 * offsetDelta are parsed and their bytes copied as they are (runs of consecutive kept
 * records in one copy). `out` is a new bytearray: batch[:start] (the old header, for the
 * caller to rewrite) followed by the kept records. With nothing kept, the deltas are 0.
 * Corrupt framing raises ValueError; the twin is fileformat.batch._filter_records_py. */

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

static PyMethodDef native_methods[] = {
    /* filter (compaction walk) */
    {"filter_records", native_filter_records, METH_VARARGS,
     "filter_records(batch, start, mask) -> (bytearray, kept, last_offset_delta,"
     " max_timestamp_delta): the batch's header and its records kept by mask."},
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
    if (m != NULL && PyModule_AddIntConstant(m, "ABI", NATIVE_ABI) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
