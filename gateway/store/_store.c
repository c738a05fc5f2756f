/* The store's hot path in C: a commitlog record written straight into its segment's mapping (as commit_log.py's
 * _record and encode_record build it), and the index entries of one message's keys (hash, slot chain, entry, as
 * index_file.py's IndexFile._put_entries writes them). The Python code is the reference and the fallback where
 * this module was not built; the tests compare the two. Every position is checked against the mapping's size
 * before it is read or written.
 *
 * Also the commitlog's fsync thread (FsyncThread, used by flush.py): it never takes the GIL.
 */
#include "../_native.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#define INDEX_HEADER_SIZE 40
#define HASH_SLOT_SIZE 4
#define INDEX_SIZE 20
#define INVALID_INDEX 0

static PyObject *StructError; /* struct.error: what struct.pack raises for a value out of its field's range */

/* write_record(mm, pos, size, magic, crc, topic, queue_id, flag, queue_offset, phy, sys_flag, born_timestamp,
 * born_host, store_timestamp, store_host, reconsume_times, prepared_offset, body, properties): the v1 record at
 * mm[pos:pos+size]; ValueError when size is not the record's or it does not fit. */
enum { W_MM, W_POS, W_SIZE, W_MAGIC, W_CRC, W_TOPIC, W_QUEUE, W_FLAG, W_QOFF, W_PHY, W_SYS, W_BORN_TS, W_BORN_HOST,
       W_STORE_TS, W_STORE_HOST, W_RECONSUME, W_PREPARED, W_BODY, W_PROPS, W_NARGS };

static PyObject *
store_write_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != W_NARGS) {
        PyErr_SetString(PyExc_TypeError, "write_record takes 19 arguments");
        return NULL;
    }
    /* Each int argument's range, and its name for the struct.error a value out of range gets. */
    static const struct { int arg; long long lo, hi; const char *name; } ints[] = {
        {W_POS, 0, INT64_MAX, "pos"},
        {W_SIZE, 0, INT32_MAX, "size"},
        {W_MAGIC, INT32_MIN, INT32_MAX, "magic"},
        {W_CRC, INT32_MIN, INT32_MAX, "body crc"},
        {W_QUEUE, INT32_MIN, INT32_MAX, "queue_id"},
        {W_FLAG, INT32_MIN, INT32_MAX, "flag"},
        {W_QOFF, INT64_MIN, INT64_MAX, "queue_offset"},
        {W_PHY, INT64_MIN, INT64_MAX, "physical_offset"},
        {W_SYS, INT32_MIN, INT32_MAX, "sys_flag"},
        {W_BORN_TS, INT64_MIN, INT64_MAX, "born_timestamp"},
        {W_STORE_TS, INT64_MIN, INT64_MAX, "store_timestamp"},
        {W_RECONSUME, INT32_MIN, INT32_MAX, "reconsume_times"},
        {W_PREPARED, INT64_MIN, INT64_MAX, "prepared_transaction_offset"},
    };
    long long v[W_NARGS] = {0};
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
        if (packable_int(args[ints[i].arg], ints[i].lo, ints[i].hi, StructError, ints[i].name, &v[ints[i].arg]) < 0)
            return NULL;
    const int bytes_args[] = {W_TOPIC, W_BORN_HOST, W_STORE_HOST, W_BODY, W_PROPS};
    Py_buffer b[5];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 5; got++)
        if (PyObject_GetBuffer(args[bytes_args[got]], &b[got], PyBUF_SIMPLE) < 0)
            goto done;
    Py_buffer *topic = &b[0], *born = &b[1], *store = &b[2], *body = &b[3], *props = &b[4];
    if (topic->len > 127 || props->len > 32767 || body->len > INT32_MAX) {  /* their length fields' ranges */
        PyErr_SetString(StructError, "write_record: a field is too long for its length field");
        goto done;
    }
    long long total = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born->len + 8 + store->len + 4 + 8 + 4 + body->len + 1 +
                      topic->len + 2 + props->len;
    if (total != v[W_SIZE]) {
        PyErr_SetString(PyExc_ValueError, "write_record: size is not the record's");
        goto done;
    }
    Py_buffer mm;
    if (PyObject_GetBuffer(args[W_MM], &mm, PyBUF_WRITABLE) < 0)
        goto done;
    if (v[W_POS] > mm.len || total > mm.len - v[W_POS]) {
        PyErr_SetString(PyExc_ValueError, "write_record: the record does not fit in the mapping");
        PyBuffer_Release(&mm);
        goto done;
    }
    unsigned char *p = (unsigned char *)mm.buf + v[W_POS];
    put32(p, total);
    put32(p + 4, v[W_MAGIC]);
    put32(p + 8, v[W_CRC]);
    put32(p + 12, v[W_QUEUE]);
    put32(p + 16, v[W_FLAG]);
    put64(p + 20, v[W_QOFF]);
    put64(p + 28, v[W_PHY]);
    put32(p + 36, v[W_SYS]);
    put64(p + 40, v[W_BORN_TS]);
    p += 48;
    memcpy(p, born->buf, born->len);
    p += born->len;
    put64(p, v[W_STORE_TS]);
    memcpy(p + 8, store->buf, store->len);
    p += 8 + store->len;
    put32(p, v[W_RECONSUME]);
    put64(p + 4, v[W_PREPARED]);
    put32(p + 12, body->len);
    memcpy(p + 16, body->buf, body->len);
    p += 16 + body->len;
    p[0] = (unsigned char)topic->len;
    memcpy(p + 1, topic->buf, topic->len);
    p += 1 + topic->len;
    p[0] = (unsigned char)(props->len >> 8);
    p[1] = (unsigned char)props->len;
    memcpy(p + 2, props->buf, props->len);
    PyBuffer_Release(&mm);
    result = Py_NewRef(Py_None);
done:
    while (got-- > 0)
        PyBuffer_Release(&b[got]);
    return result;
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
        put32(e, hashes[i]);
        put64(e + 4, phy);
        put32(e + 12, time_diff);
        put32(e + 16, prev);
        put32(mm + slot_pos, count);
        count++;
    }
    PyBuffer_Release(&view);
    result = Py_BuildValue("(LL)", count, taken);
done:
    if (hashes != hashes_small)
        PyMem_Free(hashes);
    return result;
}

/* FsyncThread(notify_fd): one thread that syncs the files a request names, by path, without the GIL, then writes
 * a byte to notify_fd (a pipe the reactor watches). A Python worker would have to take the GIL back after every
 * system call; on a busy reactor each of those hand-overs costs two context switches. One request at a time:
 * request(paths, dir_first) starts one (the first path is a directory to fsync when dir_first), take() returns
 * None while it runs, then (errno, index of the path that failed), (0, -1) when all went well. */
typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int started, joined, stopping, notify_fd;
    char **paths;
    Py_ssize_t npaths;
    int dir_first, busy, done, err;
    Py_ssize_t failed;
} FsyncThread;

static void
free_paths(char **paths, Py_ssize_t n)
{
    if (paths == NULL)
        return;
    for (Py_ssize_t i = 0; i < n; i++)
        PyMem_RawFree(paths[i]);
    PyMem_RawFree(paths);
}

static int
sync_path(const char *path, int directory)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    /* fdatasync through a fresh descriptor writes back pages dirtied through any mapping of the file; a
     * directory needs fsync for its new entries. */
    int err = (directory ? fsync(fd) : fdatasync(fd)) < 0 ? errno : 0;
    close(fd);
    return err;
}

static void *
fsync_thread_run(void *arg)
{
    FsyncThread *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->busy && !t->stopping)
            pthread_cond_wait(&t->cv, &t->mu);
        if (!t->busy)
            break;
        char **paths = t->paths;
        Py_ssize_t n = t->npaths, i;
        int dir_first = t->dir_first, err = 0;
        pthread_mutex_unlock(&t->mu);
        for (i = 0; i < n && err == 0; i++)
            err = sync_path(paths[i], i == 0 && dir_first);
        pthread_mutex_lock(&t->mu);
        t->busy = 0;
        t->done = 1;
        t->err = err;
        t->failed = err ? i - 1 : -1;
        const char one = 1;
        while (write(t->notify_fd, &one, 1) < 0 && errno == EINTR)
            ;
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static int
fsync_thread_init(FsyncThread *t, PyObject *args, PyObject *kwds)
{
    int fd;
    if (t->started) {
        PyErr_SetString(PyExc_RuntimeError, "FsyncThread is already started");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "i:FsyncThread", &fd))
        return -1;
    t->notify_fd = fd;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    int rc = pthread_create(&t->thread, NULL, fsync_thread_run, t);
    if (rc != 0) {
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    t->started = 1;
    return 0;
}

static PyObject *
fsync_thread_request(FsyncThread *t, PyObject *args)
{
    PyObject *seq;
    int dir_first;
    if (!PyArg_ParseTuple(args, "O!p:request", &PyTuple_Type, &seq, &dir_first))
        return NULL;
    if (!t->started || t->stopping) {
        PyErr_SetString(PyExc_RuntimeError, "FsyncThread is not running");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    char **paths = PyMem_RawCalloc(n ? n : 1, sizeof(char *));
    if (paths == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        char *raw;
        Py_ssize_t len;
        if (PyBytes_AsStringAndSize(PyTuple_GET_ITEM(seq, i), &raw, &len) < 0) {
            free_paths(paths, n);
            return NULL;
        }
        if ((size_t)len != strlen(raw)) {
            free_paths(paths, n);
            PyErr_SetString(PyExc_ValueError, "embedded null byte");
            return NULL;
        }
        if ((paths[i] = PyMem_RawMalloc(len + 1)) == NULL) {
            free_paths(paths, n);
            return PyErr_NoMemory();
        }
        memcpy(paths[i], raw, len + 1);
    }
    pthread_mutex_lock(&t->mu);
    if (t->busy || t->done) {
        pthread_mutex_unlock(&t->mu);
        free_paths(paths, n);
        PyErr_SetString(PyExc_RuntimeError, "the previous request is not taken yet");
        return NULL;
    }
    free_paths(t->paths, t->npaths);
    t->paths = paths;
    t->npaths = n;
    t->dir_first = dir_first;
    t->busy = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    Py_RETURN_NONE;
}

static PyObject *
fsync_thread_take(FsyncThread *t, PyObject *unused)
{
    if (!t->started)
        Py_RETURN_NONE;
    pthread_mutex_lock(&t->mu);
    int done = t->done, err = t->err;
    Py_ssize_t failed = t->failed;
    t->done = 0;
    pthread_mutex_unlock(&t->mu);
    if (!done)
        Py_RETURN_NONE;
    return Py_BuildValue("(in)", err, failed);
}

static void
fsync_thread_join(FsyncThread *t)
{
    if (!t->started || t->joined)
        return;
    pthread_mutex_lock(&t->mu);
    t->stopping = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(t->thread, NULL); /* after the request it is running, if any */
    Py_END_ALLOW_THREADS
    t->joined = 1;
}

static PyObject *
fsync_thread_stop(FsyncThread *t, PyObject *unused)
{
    fsync_thread_join(t);
    Py_RETURN_NONE;
}

static void
fsync_thread_dealloc(FsyncThread *t)
{
    fsync_thread_join(t);
    if (t->started) {
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
    }
    free_paths(t->paths, t->npaths);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyMethodDef fsync_thread_methods[] = {
    {"request", (PyCFunction)fsync_thread_request, METH_VARARGS,
     "request(paths, dir_first): sync these files (bytes paths; the first a directory when dir_first)."},
    {"take", (PyCFunction)fsync_thread_take, METH_NOARGS,
     "take() -> None while a request runs, else (errno, index of the failed path) once: (0, -1) for success."},
    {"stop", (PyCFunction)fsync_thread_stop, METH_NOARGS, "stop(): finish the running request, end the thread."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FsyncThreadType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gateway.store._store.FsyncThread",
    .tp_doc = "FsyncThread(notify_fd): a thread that fsyncs files without the GIL and writes a byte to notify_fd "
              "after each request.",
    .tp_basicsize = sizeof(FsyncThread),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)fsync_thread_init,
    .tp_dealloc = (destructor)fsync_thread_dealloc,
    .tp_methods = fsync_thread_methods,
};

static PyMethodDef methods[] = {
    {"write_record", (PyCFunction)(void (*)(void))store_write_record, METH_FASTCALL,
     "write_record(mm, pos, size, magic, crc, topic, ...): a v1 commitlog record into the mapping."},
    {"put_entries", (PyCFunction)(void (*)(void))index_put_entries, METH_FASTCALL,
     "put_entries(mm, hash_slot_num, count, keys, phy_offset, time_diff) -> (count, slots_taken)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gateway.store._store",
    "The store's hot path in C (see gateway.store.commit_log and index_file for the reference).", -1, methods,
};

PyMODINIT_FUNC
PyInit__store(void)
{
    PyObject *struct_module = PyImport_ImportModule("struct");
    if (struct_module == NULL)
        return NULL;
    StructError = PyObject_GetAttrString(struct_module, "error");
    Py_DECREF(struct_module);
    if (StructError == NULL || PyType_Ready(&FsyncThreadType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&FsyncThreadType);
    if (PyModule_AddObject(m, "FsyncThread", (PyObject *)&FsyncThreadType) < 0) {
        Py_DECREF(&FsyncThreadType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
