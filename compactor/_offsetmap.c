/* compactor._offsetmap: pass 1's offset map, key hash -> position of the key's latest record.
 *
 * Open addressing with Robin Hood linear probing over two flat arrays: 16-byte key hashes
 * (all zero = an empty slot: the null key's hash is never stored) and 4-byte positions
 * (a record's ordinal in its partition's records of the job, which orders like its offset:
 * 20 B per slot). The home slot is the hash's first 8 bytes scaled to the table size, so any
 * size works. At most `capacity` keys; the table grows at load 0.9, doubling while it is at
 * most 1/16 of its largest size and then straight to that size, so old + new never exceed
 * 21.25 B x slots of the largest table: within capacity x 24 B, the budget (compactor/
 * offsetmap.py). Loops run without the interpreter lock; a map is used by one thread at a
 * time (a second caller meanwhile gets RuntimeError). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Bumped when a function's contract changes, so a stale build is refused at import. */
#define OFFSETMAP_ABI 1
#define HASH_SIZE 16
#define MIN_SLOTS 64

typedef struct {
    PyObject_HEAD
    uint64_t *keys;      /* 2 words per slot */
    uint32_t *pos;       /* 1 per slot */
    Py_ssize_t slots;
    Py_ssize_t max_slots;
    Py_ssize_t count;
    Py_ssize_t capacity;
    int busy;
} OffsetMap;

static inline Py_ssize_t home_of(uint64_t h0, Py_ssize_t slots) {
    return (Py_ssize_t)(((unsigned __int128)h0 * (uint64_t)slots) >> 64);
}

static inline Py_ssize_t max_load(Py_ssize_t slots) { return slots * 9 / 10; }

/* Place a key known to be absent (rehash or a checked new key). */
static void place(uint64_t *keys, uint32_t *pos, Py_ssize_t slots, uint64_t h0, uint64_t h1,
                  uint32_t p) {
    Py_ssize_t i = home_of(h0, slots), dist = 0;
    for (;;) {
        uint64_t s0 = keys[2 * i], s1 = keys[2 * i + 1];
        if ((s0 | s1) == 0) {
            keys[2 * i] = h0; keys[2 * i + 1] = h1; pos[i] = p;
            return;
        }
        Py_ssize_t sh = home_of(s0, slots);
        Py_ssize_t sdist = i >= sh ? i - sh : i + slots - sh;
        if (sdist < dist) {  /* Robin Hood: the richer entry moves on */
            uint32_t sp = pos[i];
            keys[2 * i] = h0; keys[2 * i + 1] = h1; pos[i] = p;
            h0 = s0; h1 = s1; p = sp; dist = sdist;
        }
        if (++i == slots) i = 0;
        dist++;
    }
}

/* Slot holding the key, or -1. */
static Py_ssize_t find(const OffsetMap *m, uint64_t h0, uint64_t h1) {
    Py_ssize_t slots = m->slots, i = home_of(h0, slots), dist = 0;
    for (;;) {
        uint64_t s0 = m->keys[2 * i], s1 = m->keys[2 * i + 1];
        if ((s0 | s1) == 0) return -1;
        if (s0 == h0 && s1 == h1) return i;
        Py_ssize_t sh = home_of(s0, slots);
        Py_ssize_t sdist = i >= sh ? i - sh : i + slots - sh;
        if (sdist < dist) return -1;
        if (++i == slots) i = 0;
        dist++;
    }
}

static int alloc_table(Py_ssize_t slots, uint64_t **keys, uint32_t **pos) {
    *keys = PyMem_RawCalloc((size_t)slots * 2, sizeof(uint64_t));
    *pos = PyMem_RawCalloc((size_t)slots, sizeof(uint32_t));
    if (*keys == NULL || *pos == NULL) {
        PyMem_RawFree(*keys);
        PyMem_RawFree(*pos);
        return -1;
    }
    return 0;
}

/* The next size: doubling while that stays within 1/16 of the largest, then the largest. */
static Py_ssize_t next_slots(const OffsetMap *m) {
    Py_ssize_t want = m->slots * 2;
    return want * 16 <= m->max_slots ? want : m->max_slots;
}

static int grow(OffsetMap *m) {
    Py_ssize_t slots = next_slots(m);
    uint64_t *keys;
    uint32_t *pos;
    if (slots <= m->slots || alloc_table(slots, &keys, &pos) < 0) return -1;
    for (Py_ssize_t i = 0; i < m->slots; i++) {
        uint64_t s0 = m->keys[2 * i], s1 = m->keys[2 * i + 1];
        if (s0 | s1) place(keys, pos, slots, s0, s1, m->pos[i]);
    }
    PyMem_RawFree(m->keys);
    PyMem_RawFree(m->pos);
    m->keys = keys;
    m->pos = pos;
    m->slots = slots;
    return 0;
}

static int OffsetMap_init(OffsetMap *m, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"capacity", NULL};
    Py_ssize_t capacity;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n", kwlist, &capacity)) return -1;
    if (capacity < 1 || capacity > (Py_ssize_t)UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "capacity must be 1..2**32-1 keys");
        return -1;
    }
    if (m->keys != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "OffsetMap is already initialised");
        return -1;
    }
    /* The smallest table whose load limit holds `capacity` keys. */
    Py_ssize_t max_slots = capacity + capacity / 9 + 1;
    while (max_load(max_slots) < capacity) max_slots++;
    if (max_slots < MIN_SLOTS) max_slots = MIN_SLOTS;
    m->max_slots = max_slots;
    m->slots = MIN_SLOTS * 16 <= max_slots ? MIN_SLOTS : max_slots;
    m->capacity = capacity;
    m->count = 0;
    m->busy = 0;
    if (alloc_table(m->slots, &m->keys, &m->pos) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void OffsetMap_dealloc(OffsetMap *m) {
    PyMem_RawFree(m->keys);
    PyMem_RawFree(m->pos);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static int enter(OffsetMap *m) {
    if (m->keys == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "OffsetMap is not initialised");
        return -1;
    }
    if (m->busy) {
        PyErr_SetString(PyExc_RuntimeError, "OffsetMap is in use by another thread");
        return -1;
    }
    m->busy = 1;
    return 0;
}

static int hashes_arg(Py_buffer *buf, Py_ssize_t first, Py_ssize_t *n) {
    if (buf->len % HASH_SIZE) {
        PyErr_SetString(PyExc_ValueError, "key hash bytes are not a multiple of 16");
        return -1;
    }
    *n = buf->len / HASH_SIZE;
    if (first < 0 || first + *n > (Py_ssize_t)UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "positions must lie in 0..2**32-1");
        return -1;
    }
    return 0;
}

/* insert(hashes, first) -> (consumed, nulls) */
static PyObject *OffsetMap_insert(OffsetMap *m, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t first, n, done = 0, nulls = 0;
    int oom = 0;
    if (!PyArg_ParseTuple(args, "y*n", &buf, &first)) return NULL;
    if (hashes_arg(&buf, first, &n) < 0 || enter(m) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    const unsigned char *h = buf.buf;
    Py_BEGIN_ALLOW_THREADS
    for (; done < n; done++) {
        uint64_t h0, h1;
        memcpy(&h0, h + done * HASH_SIZE, 8);
        memcpy(&h1, h + done * HASH_SIZE + 8, 8);
        if ((h0 | h1) == 0) { nulls++; continue; }
        uint32_t p = (uint32_t)(first + done);
        Py_ssize_t at = find(m, h0, h1);
        if (at >= 0) { m->pos[at] = p; continue; }
        if (m->count >= m->capacity) break;  /* full: the map ends before this record */
        if (m->count + 1 > max_load(m->slots) && grow(m) < 0) { oom = 1; break; }
        place(m->keys, m->pos, m->slots, h0, h1, p);
        m->count++;
    }
    Py_END_ALLOW_THREADS
    m->busy = 0;
    PyBuffer_Release(&buf);
    if (oom) return PyErr_NoMemory();
    return Py_BuildValue("nn", done, nulls);
}

/* survivors(hashes, first, end, out) -> kept */
static PyObject *OffsetMap_survivors(OffsetMap *m, PyObject *args) {
    Py_buffer buf, out;
    Py_ssize_t first, end, n, kept = 0;
    if (!PyArg_ParseTuple(args, "y*nnw*", &buf, &first, &end, &out)) return NULL;
    if (hashes_arg(&buf, first, &n) < 0 || (out.len != n &&
            (PyErr_SetString(PyExc_ValueError, "out must hold one byte per hash"), 1))
            || enter(m) < 0) {
        PyBuffer_Release(&buf);
        PyBuffer_Release(&out);
        return NULL;
    }
    const unsigned char *h = buf.buf;
    unsigned char *o = out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t p = first + i;
        unsigned char keep = 1;
        if (p < end) {
            uint64_t h0, h1;
            memcpy(&h0, h + i * HASH_SIZE, 8);
            memcpy(&h1, h + i * HASH_SIZE + 8, 8);
            if (h0 | h1) {
                Py_ssize_t at = find(m, h0, h1);
                keep = at < 0 || (Py_ssize_t)m->pos[at] <= p;
            }
        }
        o[i] = keep;
        kept += keep;
    }
    Py_END_ALLOW_THREADS
    m->busy = 0;
    PyBuffer_Release(&buf);
    PyBuffer_Release(&out);
    return PyLong_FromSsize_t(kept);
}

/* get(hash) -> position or None */
static PyObject *OffsetMap_get(OffsetMap *m, PyObject *arg) {
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0) return NULL;
    if (buf.len != HASH_SIZE) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "a key hash is 16 bytes");
        return NULL;
    }
    uint64_t h0, h1;
    memcpy(&h0, buf.buf, 8);
    memcpy(&h1, (const char *)buf.buf + 8, 8);
    PyBuffer_Release(&buf);
    if (m->keys == NULL || (h0 | h1) == 0) Py_RETURN_NONE;
    Py_ssize_t at = find(m, h0, h1);
    if (at < 0) Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(m->pos[at]);
}

static Py_ssize_t OffsetMap_len(OffsetMap *m) { return m->count; }

static PyObject *OffsetMap_nbytes(OffsetMap *m, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(m->slots * (Py_ssize_t)(2 * sizeof(uint64_t) + sizeof(uint32_t)));
}

static PyObject *OffsetMap_slots(OffsetMap *m, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(m->slots);
}

static PyObject *OffsetMap_capacity(OffsetMap *m, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(m->capacity);
}

static PyMethodDef OffsetMap_methods[] = {
    {"insert", (PyCFunction)OffsetMap_insert, METH_VARARGS,
     "insert(hashes, first) -> (consumed, nulls): record the hashes' keys at positions"
     " first, first+1, ... (the latest wins); null hashes are skipped; stops before a new"
     " key once the map holds `capacity` keys."},
    {"survivors", (PyCFunction)OffsetMap_survivors, METH_VARARGS,
     "survivors(hashes, first, end, out) -> kept: out[i] = 0 iff position first+i < end and"
     " the map holds a later position of its (non-null) key, else 1."},
    {"get", (PyCFunction)OffsetMap_get, METH_O, "get(hash) -> the key's position or None."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef OffsetMap_getset[] = {
    {"nbytes", (getter)OffsetMap_nbytes, NULL, "bytes of the table's slots", NULL},
    {"slots", (getter)OffsetMap_slots, NULL, "slots of the table now", NULL},
    {"capacity", (getter)OffsetMap_capacity, NULL, "most keys it holds", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods OffsetMap_as_sequence = {
    .sq_length = (lenfunc)OffsetMap_len,
};

static PyTypeObject OffsetMapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "compactor._offsetmap.OffsetMap",
    .tp_basicsize = sizeof(OffsetMap),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Key hash -> latest position, at most `capacity` keys (Robin Hood hashing).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)OffsetMap_init,
    .tp_dealloc = (destructor)OffsetMap_dealloc,
    .tp_methods = OffsetMap_methods,
    .tp_getset = OffsetMap_getset,
    .tp_as_sequence = &OffsetMap_as_sequence,
};

static struct PyModuleDef offsetmap_module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "compactor._offsetmap",
    .m_doc = "Pass 1's offset map (key hash -> latest position), compiled.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__offsetmap(void) {
    if (PyType_Ready(&OffsetMapType) < 0) return NULL;
    PyObject *m = PyModule_Create(&offsetmap_module);
    if (m == NULL) return NULL;
    Py_INCREF(&OffsetMapType);
    if (PyModule_AddObject(m, "OffsetMap", (PyObject *)&OffsetMapType) < 0 ||
        PyModule_AddIntConstant(m, "ABI", OFFSETMAP_ABI) < 0) {
        Py_DECREF(&OffsetMapType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
