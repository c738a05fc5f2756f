/* An index file's hot path in C: the entries of one message's keys (hash, slot chain, entry) written into the
 * mapping, as gateway/store/index_file.py's IndexFile.put_keys does in Python (the reference and the fallback
 * where this module was not built; the tests compare the two). Every position is checked against the mapping's
 * size before it is read or written.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define INDEX_HEADER_SIZE 40
#define HASH_SLOT_SIZE 4
#define INDEX_SIZE 20
#define INVALID_INDEX 0

static inline int32_t
get32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static inline void
put32(unsigned char *p, uint32_t u)
{
    p[0] = (unsigned char)(u >> 24);
    p[1] = (unsigned char)(u >> 16);
    p[2] = (unsigned char)(u >> 8);
    p[3] = (unsigned char)u;
}

static inline void
put64(unsigned char *p, uint64_t u)
{
    put32(p, (uint32_t)(u >> 32));
    put32(p + 4, (uint32_t)u);
}

/* indexKeyHashMethod: abs(key.hashCode()) over UTF-16 code units, Integer.MIN_VALUE as 0. -1 for a key with a
 * surrogate code point (Python cannot encode it as UTF-16; the Python path raises for it). */
static int64_t
key_hash(PyObject *key)
{
    int kind = PyUnicode_KIND(key);
    const void *data = PyUnicode_DATA(key);
    Py_ssize_t n = PyUnicode_GET_LENGTH(key);
    uint32_t h = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 0x10000) {
            if (c >= 0xD800 && c <= 0xDFFF)
                return -1;
            h = 31 * h + c;
        } else {
            c -= 0x10000;
            h = 31 * h + (0xD800 + (c >> 10));
            h = 31 * h + (0xDC00 + (c & 0x3FF));
        }
    }
    int32_t s = (int32_t)h;
    if (s == INT32_MIN)
        return 0;
    return s < 0 ? -(int64_t)s : s;
}

static PyObject *
index_key_hash(PyObject *self, PyObject *key)
{
    if (!PyUnicode_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "key_hash(key: str)");
        return NULL;
    }
    int64_t h = key_hash(key);
    if (h < 0)
        Py_RETURN_NOTIMPLEMENTED;
    return PyLong_FromLongLong(h);
}

/* put_entries(mm, hash_slot_num, count, keys, phy_offset, time_diff) -> (count, slots_taken) or NotImplemented.
 * Entry `count` onwards get the keys in order; each key's slot is pointed at its entry and the entry at the
 * slot's previous entry (none when the slot is empty or points past `count`, a torn write). slots_taken is how
 * many slots were empty. NotImplemented (nothing written) for a key the Python path must handle. */
static PyObject *
index_put_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "put_entries(mm, hash_slot_num, count, keys: list, phy_offset, time_diff)");
        return NULL;
    }
    long long slots = PyLong_AsLongLong(args[1]);
    long long count = PyLong_AsLongLong(args[2]);
    long long phy = PyLong_AsLongLong(args[4]);
    long long time_diff = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *keys = args[3];
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (slots <= 0 || count < 0 || count + n > INT32_MAX || time_diff < INT32_MIN || time_diff > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "put_entries: count, slots or time_diff out of range");
        return NULL;
    }
    /* Hashes first: a key the Python path must take leaves the mapping untouched. */
    int64_t hashes_small[8];
    int64_t *hashes = n <= 8 ? hashes_small : PyMem_Malloc(sizeof(int64_t) * n);
    if (hashes == NULL)
        return PyErr_NoMemory();
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i);
        if (!PyUnicode_Check(key) || (hashes[i] = key_hash(key)) < 0) {
            result = Py_NewRef(Py_NotImplemented);
            goto done;
        }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0)
        goto done;
    unsigned char *mm = view.buf;
    long long entries_at = INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE;
    if (entries_at > view.len || (count + n) * INDEX_SIZE > view.len - entries_at) {
        PyErr_SetString(PyExc_ValueError, "put_entries: the entries do not fit in the mapping");
        PyBuffer_Release(&view);
        goto done;
    }
    long long taken = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long slot_pos = INDEX_HEADER_SIZE + (hashes[i] % slots) * HASH_SLOT_SIZE;
        long long prev = get32(mm + slot_pos);
        if (prev <= INVALID_INDEX || prev > count) {
            prev = INVALID_INDEX;
            taken++;
        }
        unsigned char *e = mm + entries_at + count * INDEX_SIZE;
        put32(e, (uint32_t)hashes[i]);
        put64(e + 4, (uint64_t)phy);
        put32(e + 12, (uint32_t)time_diff);
        put32(e + 16, (uint32_t)prev);
        put32(mm + slot_pos, (uint32_t)count);
        count++;
    }
    PyBuffer_Release(&view);
    result = Py_BuildValue("(LL)", count, taken);
done:
    if (hashes != hashes_small)
        PyMem_Free(hashes);
    return result;
}

static PyMethodDef methods[] = {
    {"key_hash", index_key_hash, METH_O, "key_hash(key) -> abs(Java hashCode), or NotImplemented."},
    {"put_entries", (PyCFunction)(void (*)(void))index_put_entries, METH_FASTCALL,
     "put_entries(mm, hash_slot_num, count, keys, phy_offset, time_diff) -> (count, slots_taken)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gateway.store._index",
    "An index file's hot path in C (see gateway.store.index_file for the reference).", -1, methods,
};

PyMODINIT_FUNC
PyInit__index(void)
{
    return PyModule_Create(&module);
}
