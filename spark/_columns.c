/* The data source's hot loop in C: pull bodies straight into Arrow column buffers (spark/columns.py's NativeColumns
 * makes the record batch from them without copying again). spark/columns.py's RecordColumns is the reference and
 * the fallback where this module was not built; the tests compare the two on the same bodies.
 *
 * Records with an IPv6 host or a compressed body, and property strings Java would read by skipping malformed
 * segments, are handed to the Python functions given to Columns() (few in practice). Every position is checked
 * against the record's size before it is read; a record that does not add up raises RecordError.
 */
#include "../gateway/_native.h"

#define MAGIC_CODE ((int32_t)0xDAA320A7)
#define FIXED_V4 88 /* totalSize .. bodyLength of a record with IPv4 hosts */
#define SLOW_FLAGS (0x1 | 0x10 | 0x20) /* COMPRESSED, BORNHOST_V6, STOREHOSTADDRESS_V6 */
#define NAME_SEP '\x01'
#define PROP_SEP '\x02'

static inline int64_t
get64(const unsigned char *p)
{
    return (int64_t)(((uint64_t)(uint32_t)get32(p) << 32) | (uint32_t)get32(p + 4));
}

/* A growable byte buffer. */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

static int
buf_reserve(Buf *b, Py_ssize_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int
buf_put(Buf *b, const void *src, Py_ssize_t n)
{
    if (buf_reserve(b, n) < 0)
        return -1;
    if (n)
        memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static inline int
buf_i32(Buf *b, int32_t v)
{
    return buf_put(b, &v, 4);
}

static inline int
buf_i64(Buf *b, int64_t v)
{
    return buf_put(b, &v, 8);
}

/* A string or binary column: int32 offsets (native order, as Arrow wants them) and the data; a byte per row
 * saying whether the value is there (only nullable columns read it). */
typedef struct {
    Buf offsets, data, valid;
} Var;

static int
var_reset(Var *v)
{
    v->offsets.len = v->data.len = v->valid.len = 0;
    return buf_i32(&v->offsets, 0);
}

static int
var_put(Var *v, const char *src, Py_ssize_t n, int valid)
{
    if (v->data.len + n > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 2 GiB in one column of a record batch");
        return -1;
    }
    if (buf_put(&v->data, src, n) < 0 || buf_i32(&v->offsets, (int32_t)v->data.len) < 0)
        return -1;
    unsigned char flag = (unsigned char)valid;
    return buf_put(&v->valid, &flag, 1);
}

/* ip:port of packed IPv4 host bytes; the last one a column saw is kept (a queue's rows share a few hosts). */
typedef struct {
    unsigned char packed[8];
    char text[32];
    int len; /* 0: none yet */
} HostText;

static int
put_host(Var *v, HostText *last, const unsigned char *h)
{
    if (last->len == 0 || memcmp(last->packed, h, 8) != 0) {
        memcpy(last->packed, h, 8);
        last->len = snprintf(last->text, sizeof(last->text), "%u.%u.%u.%u:%d", h[0], h[1], h[2], h[3],
                             (int)get32(h + 4));
    }
    return var_put(v, last->text, last->len, 1);
}

enum { C_QUEUE_OFFSET, C_COMMITLOG_OFFSET, C_BORN_TS, C_STORE_TS, C_RECONSUME, N_FIXED };
enum { V_MSG_ID, V_KEYS, V_TAGS, V_BORN_HOST, V_STORE_HOST, V_BODY, V_PROP_KEYS, V_PROP_VALUES, N_VAR };

typedef struct {
    PyObject_HEAD
    PyObject *general_row;  /* (buf, pos) -> (row tuple, properties str): records C leaves to Python */
    PyObject *parse_props;  /* str -> dict: string_to_properties, for malformed property strings */
    PyObject *record_error; /* RecordError */
    Buf fixed[N_FIXED];
    Var var[N_VAR];
    Buf map_offsets;
    HostText born_host, store_host;
    Py_ssize_t rows;
} Columns;

static int
columns_reset(Columns *self)
{
    for (int i = 0; i < N_FIXED; i++)
        self->fixed[i].len = 0;
    for (int i = 0; i < N_VAR; i++)
        if (var_reset(&self->var[i]) < 0)
            return -1;
    self->map_offsets.len = 0;
    self->rows = 0;
    return buf_i32(&self->map_offsets, 0);
}

/* Whether s[0:n] is UTF-8 that Python's strict decoder takes (no overlong forms, surrogates or > U+10FFFF). */
static int
valid_utf8(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        if (n - i >= 8) {
            uint64_t eight;
            memcpy(&eight, s + i, 8);
            if ((eight & 0x8080808080808080u) == 0) { /* eight ASCII bytes, the usual case */
                i += 8;
                continue;
            }
        }
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
        }
        else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        }
        else
            return 0;
        if (i + len > n || s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (int k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF)
                return 0;
        i += len;
    }
    return 1;
}

/* property_value: the value after `name` (a property name and 0x01) where it starts the string or follows a
 * 0x02, up to the next 0x02; NULL when absent or empty. */
static const char *
property_value(const char *s, Py_ssize_t n, const char *name, Py_ssize_t name_len, Py_ssize_t *value_len)
{
    for (Py_ssize_t i = 0; i + name_len <= n; i++) {
        if ((i == 0 || s[i - 1] == PROP_SEP) && memcmp(s + i, name, (size_t)name_len) == 0) {
            const char *v = s + i + name_len;
            const char *end = memchr(v, PROP_SEP, (size_t)(n - i - name_len));
            *value_len = end ? end - v : n - i - name_len;
            return *value_len ? v : NULL;
        }
        const char *next = memchr(s + i, PROP_SEP, (size_t)(n - i));
        if (next == NULL)
            return NULL;
        i = next - s; /* the loop's i++ steps past the separator */
    }
    return NULL;
}

/* Whether every segment of s[0:n] (n > 0) is name 0x01 value, both non-empty, with no other 0x01. */
static int
well_formed(const char *s, Py_ssize_t n)
{
    Py_ssize_t seg = 0;
    while (seg <= n) {
        const char *end = memchr(s + seg, PROP_SEP, (size_t)(n - seg));
        Py_ssize_t seg_end = end ? end - s : n;
        const char *sep = memchr(s + seg, NAME_SEP, (size_t)(seg_end - seg));
        if (sep == NULL || sep == s + seg || sep == s + seg_end - 1)
            return 0;
        if (memchr(sep + 1, NAME_SEP, (size_t)(s + seg_end - sep - 1)) != NULL)
            return 0;
        seg = seg_end + 1;
    }
    return 1;
}

/* The row's properties into the map columns: its segments as they are when well formed, else as Java reads
 * them (parse_props). */
static int
add_properties(Columns *self, const char *s, Py_ssize_t n)
{
    Var *keys = &self->var[V_PROP_KEYS], *values = &self->var[V_PROP_VALUES];
    if (n > 0 && well_formed(s, n)) {
        Py_ssize_t seg = 0;
        while (seg <= n) {
            const char *end = memchr(s + seg, PROP_SEP, (size_t)(n - seg));
            Py_ssize_t seg_end = end ? end - s : n;
            const char *sep = memchr(s + seg, NAME_SEP, (size_t)(seg_end - seg));
            if (var_put(keys, s + seg, sep - (s + seg), 1) < 0 ||
                var_put(values, sep + 1, s + seg_end - sep - 1, 1) < 0)
                return -1;
            seg = seg_end + 1;
        }
    }
    else if (n > 0) {
        PyObject *dict = PyObject_CallFunction(self->parse_props, "s#", s, n);
        if (dict == NULL)
            return -1;
        PyObject *k, *v;
        Py_ssize_t i = 0;
        while (PyDict_Next(dict, &i, &k, &v)) {
            Py_ssize_t kn, vn;
            const char *ks = PyUnicode_AsUTF8AndSize(k, &kn), *vs = ks ? PyUnicode_AsUTF8AndSize(v, &vn) : NULL;
            if (vs == NULL || var_put(keys, ks, kn, 1) < 0 || var_put(values, vs, vn, 1) < 0) {
                Py_DECREF(dict);
                return -1;
            }
        }
        Py_DECREF(dict);
    }
    return buf_i32(&self->map_offsets, (int32_t)keys->offsets.len / 4 - 1);
}


/* offsetMsgId: store host, port and commitlog offset in upper-case hex. */
static int
put_offset_msg_id(Var *v, const unsigned char *store_host, const unsigned char *phy)
{
    static const char hex[] = "0123456789ABCDEF";
    char text[32];
    for (int i = 0; i < 16; i++) {
        unsigned char c = i < 8 ? store_host[i] : phy[i - 8];
        text[2 * i] = hex[c >> 4];
        text[2 * i + 1] = hex[c & 0xF];
    }
    return var_put(v, text, 32, 1);
}

static int
put_str(Var *v, PyObject *o, int nullable)
{
    if (o == Py_None && nullable)
        return var_put(v, "", 0, 0);
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(o, &n);
    return s ? var_put(v, s, n, 1) : -1;
}

/* A row the general decoder made: (queueOffset, commitLogOffset, msgId, keys, tags, bornTimestamp,
 * storeTimestamp, bornHost, storeHost, reconsumeTimes, body) and its properties string. */
static int
add_general(Columns *self, PyObject *buf, Py_ssize_t pos)
{
    PyObject *got = PyObject_CallFunction(self->general_row, "On", buf, pos);
    if (got == NULL)
        return -1;
    int rc = -1;
    PyObject *row, *props;
    if (!PyArg_ParseTuple(got, "O!U", &PyTuple_Type, &row, &props) || PyTuple_GET_SIZE(row) != 11) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "general_row must give an 11-tuple and a str");
        goto done;
    }
    long long ints[5];
    const int at[5] = {0, 1, 5, 6, 9};
    for (int i = 0; i < 5; i++) {
        ints[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(row, at[i]));
        if (ints[i] == -1 && PyErr_Occurred())
            goto done;
    }
    char *body;
    Py_ssize_t body_len;
    if (PyBytes_AsStringAndSize(PyTuple_GET_ITEM(row, 10), &body, &body_len) < 0)
        goto done;
    Py_ssize_t props_len;
    const char *p = PyUnicode_AsUTF8AndSize(props, &props_len);
    if (p == NULL || buf_i64(&self->fixed[C_QUEUE_OFFSET], ints[0]) < 0 ||
        buf_i64(&self->fixed[C_COMMITLOG_OFFSET], ints[1]) < 0 ||
        buf_i64(&self->fixed[C_BORN_TS], (int64_t)((uint64_t)ints[2] * 1000u)) < 0 ||
        buf_i64(&self->fixed[C_STORE_TS], (int64_t)((uint64_t)ints[3] * 1000u)) < 0 ||
        buf_i32(&self->fixed[C_RECONSUME], (int32_t)ints[4]) < 0 ||
        put_str(&self->var[V_MSG_ID], PyTuple_GET_ITEM(row, 2), 0) < 0 ||
        put_str(&self->var[V_KEYS], PyTuple_GET_ITEM(row, 3), 1) < 0 ||
        put_str(&self->var[V_TAGS], PyTuple_GET_ITEM(row, 4), 1) < 0 ||
        put_str(&self->var[V_BORN_HOST], PyTuple_GET_ITEM(row, 7), 0) < 0 ||
        put_str(&self->var[V_STORE_HOST], PyTuple_GET_ITEM(row, 8), 0) < 0 ||
        var_put(&self->var[V_BODY], body, body_len, 1) < 0 || add_properties(self, p, props_len) < 0)
        goto done;
    self->rows++;
    rc = 0;
done:
    Py_DECREF(got);
    return rc;
}

static int
record_error(Columns *self, Py_ssize_t pos)
{
    PyErr_Format(self->record_error, "bad record at %zd", pos);
    return -1;
}

/* The record at b[pos:pos+total] (IPv4 hosts, body not compressed). */
static int
add_fast(Columns *self, const unsigned char *b, Py_ssize_t pos, Py_ssize_t total)
{
    const unsigned char *r = b + pos, *end = r + total;
    int32_t body_len = get32(r + 84);
    const unsigned char *body = r + FIXED_V4;
    if (body_len < 0 || body_len > end - body - 3) /* room for the body, the topic's length and the props' */
        return record_error(self, pos);
    const unsigned char *topic = body + body_len;
    if (topic[0] > end - topic - 3) /* the topic, then the props' length */
        return record_error(self, pos);
    const unsigned char *props = topic + 1 + topic[0];
    Py_ssize_t props_len = ((Py_ssize_t)props[0] << 8) | props[1];
    props += 2;
    if (props + props_len != end || !valid_utf8(props, props_len))
        return record_error(self, pos);
    const char *ps = (const char *)props, *v;
    Py_ssize_t vn;
    Var *var = self->var;
    int rc = 0;
    if ((v = property_value(ps, props_len, "UNIQ_KEY\x01", 9, &vn)) != NULL)
        rc |= var_put(&var[V_MSG_ID], v, vn, 1);
    else
        rc |= put_offset_msg_id(&var[V_MSG_ID], r + 64, r + 28);
    v = property_value(ps, props_len, "KEYS\x01", 5, &vn);
    rc |= var_put(&var[V_KEYS], v ? v : "", v ? vn : 0, v != NULL);
    v = property_value(ps, props_len, "TAGS\x01", 5, &vn);
    rc |= var_put(&var[V_TAGS], v ? v : "", v ? vn : 0, v != NULL);
    rc |= buf_i64(&self->fixed[C_QUEUE_OFFSET], get64(r + 20));
    rc |= buf_i64(&self->fixed[C_COMMITLOG_OFFSET], get64(r + 28));
    rc |= buf_i64(&self->fixed[C_BORN_TS], (int64_t)((uint64_t)get64(r + 40) * 1000u));
    rc |= buf_i64(&self->fixed[C_STORE_TS], (int64_t)((uint64_t)get64(r + 56) * 1000u));
    rc |= buf_i32(&self->fixed[C_RECONSUME], get32(r + 72));
    rc |= put_host(&var[V_BORN_HOST], &self->born_host, r + 48);
    rc |= put_host(&var[V_STORE_HOST], &self->store_host, r + 64);
    rc |= var_put(&var[V_BODY], (const char *)body, body_len, 1);
    if (rc < 0 || add_properties(self, ps, props_len) < 0)
        return -1;
    self->rows++;
    return 0;
}

/* add_records(buf, start, end): every record of a pull body whose queue offset is in [start, end). */
static PyObject *
columns_add_records(Columns *self, PyObject *args)
{
    PyObject *obj;
    long long start, end;
    if (!PyArg_ParseTuple(args, "OLL:add_records", &obj, &start, &end))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t pos = 0, n = view.len;
    int rc = 0;
    while (rc == 0 && pos < n) {
        if (n - pos < FIXED_V4) {
            rc = record_error(self, pos);
            break;
        }
        int32_t total = get32(b + pos);
        if (get32(b + pos + 4) != MAGIC_CODE || total < FIXED_V4 || total > n - pos) {
            rc = record_error(self, pos);
            break;
        }
        int64_t queue_offset = get64(b + pos + 20);
        if (queue_offset >= start && queue_offset < end)
            rc = get32(b + pos + 36) & SLOW_FLAGS ? add_general(self, obj, pos) : add_fast(self, b, pos, total);
        pos += total;
    }
    PyBuffer_Release(&view);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
buf_bytes(const Buf *b)
{
    return PyBytes_FromStringAndSize(b->data ? b->data : "", b->len);
}

/* The validity bitmap of a nullable column (LSB first, as Arrow lays it out), or None when every value is there. */
static PyObject *
bitmap(const Var *v, Py_ssize_t rows)
{
    const unsigned char *valid = (const unsigned char *)v->valid.data;
    if (rows == 0 || memchr(valid, 0, (size_t)rows) == NULL)
        Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (rows + 7) / 8);
    if (out == NULL)
        return NULL;
    unsigned char *bits = (unsigned char *)PyBytes_AS_STRING(out);
    memset(bits, 0, (size_t)(rows + 7) / 8);
    for (Py_ssize_t i = 0; i < rows; i++)
        if (valid[i])
            bits[i >> 3] |= (unsigned char)(1u << (i & 7));
    return out;
}

/* take(): (rows, fixed columns' bytes, ((validity or None, offsets, data) per string or binary column), map
 * offsets) of the rows so far, in the enums' order; then empty. */
static PyObject *
columns_take(Columns *self, PyObject *unused)
{
    PyObject *fixed = PyTuple_New(N_FIXED), *var = PyTuple_New(N_VAR), *out = NULL;
    if (fixed == NULL || var == NULL)
        goto done;
    for (int i = 0; i < N_FIXED; i++) {
        PyObject *b = buf_bytes(&self->fixed[i]);
        if (b == NULL)
            goto done;
        PyTuple_SET_ITEM(fixed, i, b);
    }
    for (int i = 0; i < N_VAR; i++) {
        Py_ssize_t n = self->var[i].offsets.len / 4 - 1;
        PyObject *t = Py_BuildValue("(NNN)", bitmap(&self->var[i], n), buf_bytes(&self->var[i].offsets),
                                    buf_bytes(&self->var[i].data));
        if (t == NULL)
            goto done;
        PyTuple_SET_ITEM(var, i, t);
    }
    out = Py_BuildValue("(nOON)", self->rows, fixed, var, buf_bytes(&self->map_offsets));
    if (out != NULL && columns_reset(self) < 0)
        Py_CLEAR(out);
done:
    Py_XDECREF(fixed);
    Py_XDECREF(var);
    return out;
}

static Py_ssize_t
columns_len(Columns *self)
{
    return self->rows;
}

static PyObject *
columns_nbytes(Columns *self, void *closure)
{
    return PyLong_FromSsize_t(self->var[V_BODY].data.len);
}

static int
columns_init(Columns *self, PyObject *args, PyObject *kwds)
{
    PyObject *general_row, *parse_props, *error;
    if (!PyArg_ParseTuple(args, "OOO:Columns", &general_row, &parse_props, &error))
        return -1;
    Py_INCREF(general_row);
    Py_INCREF(parse_props);
    Py_INCREF(error);
    Py_XSETREF(self->general_row, general_row);
    Py_XSETREF(self->parse_props, parse_props);
    Py_XSETREF(self->record_error, error);
    return columns_reset(self);
}

static void
columns_dealloc(Columns *self)
{
    Py_XDECREF(self->general_row);
    Py_XDECREF(self->parse_props);
    Py_XDECREF(self->record_error);
    for (int i = 0; i < N_FIXED; i++)
        PyMem_Free(self->fixed[i].data);
    for (int i = 0; i < N_VAR; i++) {
        PyMem_Free(self->var[i].offsets.data);
        PyMem_Free(self->var[i].data.data);
        PyMem_Free(self->var[i].valid.data);
    }
    PyMem_Free(self->map_offsets.data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef columns_methods[] = {
    {"add_records", (PyCFunction)columns_add_records, METH_VARARGS,
     "add_records(buf, start, end): every record of a pull body whose queue offset is in [start, end)."},
    {"take", (PyCFunction)columns_take, METH_NOARGS,
     "take(): (rows, fixed columns, (validity, offsets, data) per string column, map offsets); then empty."},
    {NULL},
};

static PyGetSetDef columns_getset[] = {
    {"nbytes", (getter)columns_nbytes, NULL, "Bytes of the bodies held.", NULL},
    {NULL},
};

static PySequenceMethods columns_as_sequence = {.sq_length = (lenfunc)columns_len};

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "spark._columns.Columns",
    .tp_basicsize = sizeof(Columns),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Columns(general_row, parse_properties, record_error): pulled records as Arrow column buffers.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)columns_init,
    .tp_dealloc = (destructor)columns_dealloc,
    .tp_methods = columns_methods,
    .tp_getset = columns_getset,
    .tp_as_sequence = &columns_as_sequence,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "spark._columns",
    "Pulled records into Arrow column buffers (see spark/columns.py).", -1, NULL,
};

PyMODINIT_FUNC
PyInit__columns(void)
{
    if (PyType_Ready(&ColumnsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ColumnsType);
    if (PyModule_AddObject(m, "Columns", (PyObject *)&ColumnsType) < 0) {
        Py_DECREF(&ColumnsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
