/* fileformat._native: the compiled hot loops over Kafka record batches.
 *
 * Pure functions over byte buffers (no I/O, no allocation kept across calls); every
 * function has a pure-Python twin in fileformat that tests run on the same inputs. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Bumped when a function's contract changes, so a stale build is refused at import. */
#define NATIVE_ABI 1

static PyMethodDef native_methods[] = {
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
