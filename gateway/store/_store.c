/* The store's hot path in C: a commitlog record written straight into its segment's mapping (as commit_log.py's
 * _record and encode_record build it), and one message's index entries, keys read from its properties (hash, slot
 * chain, entry and header, as index_service.py's build_index and index_file.py's IndexFile.put_keys write them).
 * And a pull's walk over consume-queue units, records copied out of their segments (message_store.py's
 * _read_units_py). The Python code is the reference and the fallback where this module was not built; the tests
 * compare the two.
 * Every position is checked against the mapping's size before it is read or written.
 *
 * Also the commitlog's fsync thread (FsyncThread, used by flush.py): it never takes the GIL.
 */
#include "record.h"
#include "crc32.h"

#include <fcntl.h>
#include <stddef.h>

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
    Record r = {
        .magic = (int32_t)v[W_MAGIC], .body_crc = (int32_t)v[W_CRC], .queue_id = (int32_t)v[W_QUEUE],
        .flag = (int32_t)v[W_FLAG], .sys_flag = (int32_t)v[W_SYS], .reconsume_times = (int32_t)v[W_RECONSUME],
        .queue_offset = v[W_QOFF], .phy = v[W_PHY], .born_timestamp = v[W_BORN_TS], .store_timestamp = v[W_STORE_TS],
        .prepared_offset = v[W_PREPARED], .born_host = born->buf, .born_len = born->len, .store_host = store->buf,
        .store_len = store->len, .body = body->buf, .body_len = body->len, .topic = topic->buf,
        .topic_len = topic->len, .props = props->buf, .props_len = props->len,
    };
    long long total = record_length(&r);
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
    put_record((unsigned char *)mm.buf + v[W_POS], total, &r);
    PyBuffer_Release(&mm);
    result = Py_NewRef(Py_None);
done:
    while (got-- > 0)
        PyBuffer_Release(&b[got]);
    return result;
}

#define BORNHOST_V6_FLAG 0x10
#define STOREHOSTADDRESS_V6_FLAG 0x20
#define MIN_RECORD_SIZE (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2)

/* parse_record(view, pos, file_from_offset) -> the record at view[pos:] as commit_log.py's
 * check_message_and_return_size reads it: (topic, queue_id, physical offset, size, store timestamp, queue offset,
 * sys flag, properties, body position, body length, body CRC); None for the end-of-segment blank; a str saying what
 * is wrong with anything else (the same words as the Python checks). */
static PyObject *
parse_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "parse_record takes 3 arguments");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    long long from = PyLong_AsLongLong(args[2]);
    if ((pos == -1 || from == -1) && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t limit = view.len;
    long long at = from + pos;
    PyObject *result = NULL;
    if (pos < 0 || pos > limit - 8) {
        result = PyUnicode_FromFormat("no room for a record at %lld", at);
        goto done;
    }
    int32_t total = get32(b + pos), magic = get32(b + pos + 4);
    if (magic == BLANK_MAGIC_CODE) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (magic != MESSAGE_MAGIC_CODE) {
        result = PyUnicode_FromFormat("bad magic code 0x%x at %lld", (unsigned int)magic, at);
        goto done;
    }
    if (total < MIN_RECORD_SIZE || total > limit - pos) {
        result = PyUnicode_FromFormat("bad record size %d at %lld", (int)total, at);
        goto done;
    }
    Py_ssize_t end = pos + total;
    const unsigned char *r = b + pos;
    int32_t crc = get32(r + 8), queue_id = get32(r + 12);
    int64_t queue_offset = ((int64_t)get32(r + 20) << 32) | (uint32_t)get32(r + 24);
    int64_t phy = ((int64_t)get32(r + 28) << 32) | (uint32_t)get32(r + 32);
    int32_t sys_flag = get32(r + 36);
    if (phy != at) {
        result = PyUnicode_FromFormat("record at %lld says it is at %lld", at, (long long)phy);
        goto done;
    }
    /* MIN_RECORD_SIZE covers every fixed field with v4 hosts; v6 hosts add 12 bytes each, checked below. */
    Py_ssize_t p = pos + 48 + ((sys_flag & BORNHOST_V6_FLAG) ? 20 : 8);
    if (p + 8 > end) {
        result = PyUnicode_FromFormat("bad record size %d at %lld", (int)total, at);
        goto done;
    }
    int64_t store_timestamp = ((int64_t)get32(b + p) << 32) | (uint32_t)get32(b + p + 4);
    p += 8 + ((sys_flag & STOREHOSTADDRESS_V6_FLAG) ? 20 : 8) + 4 + 8;
    if (p + 4 > end) {
        result = PyUnicode_FromFormat("bad record size %d at %lld", (int)total, at);
        goto done;
    }
    int32_t body_len = get32(b + p);
    p += 4;
    Py_ssize_t body_at = p;
    if (body_len < 0 || body_len > end - p - 3) {
        result = PyUnicode_FromFormat("bad body length %d at %lld", (int)body_len, at);
        goto done;
    }
    p += body_len;
    int topic_len = b[p];
    p += 1;
    Py_ssize_t topic_at = p;
    if (topic_len > end - p - 2) {
        result = PyUnicode_FromFormat("bad topic length %d at %lld", topic_len, at);
        goto done;
    }
    p += topic_len;
    int props_len = get16(b + p);
    p += 2;
    if (props_len < 0 || p + props_len != end) {
        result = PyUnicode_FromFormat("record size %d does not match its fields at %lld", (int)total, at);
        goto done;
    }
    PyObject *topic = PyUnicode_DecodeUTF8((const char *)b + topic_at, topic_len, "replace");
    PyObject *props = topic == NULL ? NULL : PyUnicode_DecodeUTF8((const char *)b + p, props_len, "replace");
    if (props != NULL)
        result = Py_BuildValue("(NiLiLLiNnii)", topic, (int)queue_id, (long long)phy, (int)total,
                               (long long)store_timestamp, (long long)queue_offset, (int)sys_flag, props, body_at,
                               (int)body_len, (int)crc);
    else
        Py_XDECREF(topic);
done:
    PyBuffer_Release(&view);
    return result;
}

/* Java's String.hashCode over UTF-16 code units, folded into h: a key's hash is the fold over the topic, '#' and the
 * key, with no string built. -1 for a surrogate code point (Python cannot encode it as UTF-16; the Python path
 * raises for it). */
static int
fold_hash(uint32_t *h, PyObject *s, Py_ssize_t start, Py_ssize_t end)
{
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    uint32_t x = *h;
    for (Py_ssize_t i = start; i < end; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 0x10000) {
            if (c >= 0xD800 && c <= 0xDFFF)
                return -1;
            x = 31 * x + c;
        } else {
            c -= 0x10000;
            x = 31 * x + (0xD800 + (c >> 10));
            x = 31 * x + (0xDC00 + (c & 0x3FF));
        }
    }
    *h = x;
    return 0;
}

/* indexKeyHashMethod of "topic#key" (key = s[start:end]): abs(hashCode()), Integer.MIN_VALUE as 0; -1 as above. */
static int64_t
index_key_hash(PyObject *topic, PyObject *s, Py_ssize_t start, Py_ssize_t end)
{
    uint32_t h = 0;
    if (fold_hash(&h, topic, 0, PyUnicode_GET_LENGTH(topic)) < 0)
        return -1;
    h = 31 * h + '#';
    if (fold_hash(&h, s, start, end) < 0)
        return -1;
    int32_t v = (int32_t)h;
    if (v == INT32_MIN)
        return 0;
    return v < 0 ? -(int64_t)v : v;
}

/* The span of property `name` (its name and 0x01 at the start of `props` or after a 0x02) in encoded properties,
 * as message.py's property_value finds it: 0 when absent or empty. */
static int
property_span(PyObject *props, const char *name, Py_ssize_t *start, Py_ssize_t *end)
{
    int kind = PyUnicode_KIND(props);
    const void *data = PyUnicode_DATA(props);
    Py_ssize_t n = PyUnicode_GET_LENGTH(props), len = (Py_ssize_t)strlen(name);
    Py_ssize_t p = 0;
    while (p < n) {
        Py_ssize_t i = 0;
        while (i < len && p + i < n && PyUnicode_READ(kind, data, p + i) == (Py_UCS4)(unsigned char)name[i])
            i++;
        Py_ssize_t q = p + i;
        if (i == len && q < n && PyUnicode_READ(kind, data, q) == 1) {
            Py_ssize_t v = q + 1, e = v;
            while (e < n && PyUnicode_READ(kind, data, e) != 2)
                e++;
            *start = v;
            *end = e;
            return e > v;
        }
        while (q < n && PyUnicode_READ(kind, data, q) != 2) /* on to the next property */
            q++;
        p = q + 1;
    }
    return 0;
}

#define MAX_MESSAGE_KEYS 64

enum { BEGIN_TS, END_TS, BEGIN_PHY, END_PHY, SLOT_COUNT, COUNT };

/* One message's index entries and the file's header written into the index file mapped as `mm_obj`, as
 * index_message describes; `h` is the header, updated. 1 when written; 0, with nothing written, for what the
 * Python path must take; -1 with an exception set. */
static int
index_into(PyObject *mm_obj, long long slots, long long index_num, long long h[6], PyObject *topic, PyObject *props,
           long long phy, long long stamp)
{
    long long count = h[COUNT];
    if (slots <= 0 || index_num > INT32_MAX || count < 0 || h[SLOT_COUNT] < INT32_MIN || h[SLOT_COUNT] > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "index_message: slots, capacity or header out of range");
        return -1;
    }
    /* Hashes first: a message the Python path must take leaves the mapping untouched. */
    int64_t hashes[MAX_MESSAGE_KEYS];
    int n = 0;
    Py_ssize_t start, end;
    if (property_span(props, "UNIQ_KEY", &start, &end) && (hashes[n++] = index_key_hash(topic, props, start, end)) < 0)
        return 0;
    if (property_span(props, "KEYS", &start, &end)) {
        int kind = PyUnicode_KIND(props);
        const void *data = PyUnicode_DATA(props);
        for (Py_ssize_t w = start; w < end;) {
            Py_ssize_t e = w;
            while (e < end && PyUnicode_READ(kind, data, e) != ' ')
                e++;
            if (e > w) {
                if (n == MAX_MESSAGE_KEYS || (hashes[n++] = index_key_hash(topic, props, w, e)) < 0)
                    return 0;
            }
            w = e + 1;
        }
    }
    if (n > index_num - count)
        return 0; /* the Python path fills this file and goes on in a new one */
    Py_buffer view;
    if (PyObject_GetBuffer(mm_obj, &view, PyBUF_WRITABLE) < 0)
        return -1;
    unsigned char *mm = view.buf;
    long long entries_at = INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE;
    if (entries_at > view.len || (count + n) * INDEX_SIZE > view.len - entries_at) {
        PyErr_SetString(PyExc_ValueError, "index_message: the entries do not fit in the mapping");
        PyBuffer_Release(&view);
        return -1;
    }
    if (n > 0) {
        if (count <= 1) { /* the first entry starts the file's span */
            h[BEGIN_PHY] = phy;
            h[BEGIN_TS] = stamp;
        }
        long long diff = h[BEGIN_TS] > 0 ? (stamp - h[BEGIN_TS]) / 1000 : 0;
        diff = diff < 0 ? 0 : diff > INT32_MAX ? INT32_MAX : diff;
        for (int i = 0; i < n; i++) {
            long long slot_pos = INDEX_HEADER_SIZE + (hashes[i] % slots) * HASH_SLOT_SIZE;
            long long prev = get32(mm + slot_pos);
            if (prev <= INVALID_INDEX || prev > count) {
                prev = INVALID_INDEX;
                h[SLOT_COUNT]++;
            }
            unsigned char *e = mm + entries_at + count * INDEX_SIZE;
            put32(e, hashes[i]);
            put64(e + 4, phy);
            put32(e + 12, diff);
            put32(e + 16, prev);
            put32(mm + slot_pos, count);
            count++;
        }
        h[COUNT] = count;
        h[END_TS] = stamp;
    }
    h[END_PHY] = phy;
    put64(mm, h[BEGIN_TS]);
    put64(mm + 8, h[END_TS]);
    put64(mm + 16, h[BEGIN_PHY]);
    put64(mm + 24, h[END_PHY]);
    put32(mm + 32, h[SLOT_COUNT]);
    put32(mm + 36, h[COUNT]);
    PyBuffer_Release(&view);
    return 1;
}

/* index_message(mm, hash_slot_num, index_num, header, topic, properties, phy_offset, store_timestamp) -> header
 * or NotImplemented: the message's index keys (topic#UNIQ_KEY, then topic#k for each word of KEYS), each chained
 * to its slot's previous entry (none when the slot is empty or points past the count, a torn write), and the
 * file's header, as index_service.py's build_index and index_file.py's put_keys write them. `header` and the
 * result are (beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount, indexCount).
 * NotImplemented, with nothing written, for what the Python path must take: a key with a surrogate, more keys
 * than the file has room for (or than MAX_MESSAGE_KEYS). */
static PyObject *
index_message(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8 || !PyTuple_Check(args[3]) || PyTuple_GET_SIZE(args[3]) != 6 || !PyUnicode_Check(args[4]) ||
        !PyUnicode_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "index_message(mm, hash_slot_num, index_num, header: 6-tuple, topic: str, "
                                         "properties: str, phy_offset, store_timestamp)");
        return NULL;
    }
    long long slots = PyLong_AsLongLong(args[1]);
    long long index_num = PyLong_AsLongLong(args[2]);
    long long h[6];
    for (int i = 0; i < 6; i++)
        h[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(args[3], i));
    long long phy = PyLong_AsLongLong(args[6]);
    long long stamp = PyLong_AsLongLong(args[7]);
    if (PyErr_Occurred())
        return NULL;
    int done = index_into(args[0], slots, index_num, h, args[4], args[5], phy, stamp);
    if (done < 0)
        return NULL;
    if (done == 0)
        Py_RETURN_NOTIMPLEMENTED;
    return Py_BuildValue("(LLLLLL)", h[0], h[1], h[2], h[3], h[4], h[5]);
}

/* Dispatcher(store, on_listener_error): the commitlog's dispatcher, store.py's DefaultMessageStore._dispatch for the
 * common case (an existing queue's next unit in its current file, the message's keys in the current index file),
 * called with the same nine arguments (or, by dispatch_run, for a batch's records at once). Everything else is
 * handed to the store's own Python methods, which stay the reference: the whole call when an argument is not what
 * the commitlog passes, a queue not made yet, a unit that rolls, leaves a gap or was written, an index file that is
 * missing or full. Nothing points into a mapping between
 * calls: each file's `mm` is asked for (and its buffer held) only while writing. A listener raising an Exception
 * is passed to on_listener_error(exc), as the Python path logs it. */
enum { A_CONFIG, A_INDEX_ENABLE, A_INDEX_SERVICE, A_LAST_INDEXED, A_FILES, A_MAPPED_FILE, A_MM, A_HASH_SLOT_NUM,
       A_INDEX_NUM, A_BEGIN_TS, A_END_TS, A_BEGIN_PHY, A_END_PHY, A_SLOT_COUNT, A_INDEX_COUNT, A_DIRTY, A_BUILD_INDEX,
       A_CQ_TABLE, A_FIND_CQ, A_MAX_PHYSIC, A_QUEUE, A_WROTE_WHERE, A_FILE_FROM, A_FILE_SIZE, A_PUT_POSITION,
       A_LOGICS_TS, A_LISTENER, A_DISPATCH, A_COUNT };
static const char *const attr_names[A_COUNT] = {
    "config", "messageIndexEnable", "index_service", "last_indexed_offset", "files", "mapped_file", "mm",
    "hash_slot_num", "index_num", "begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset",
    "hash_slot_count", "index_count", "dirty", "build_index", "consume_queue_table", "_find_consume_queue",
    "max_physic_offset", "queue", "wrote_where", "file_from_offset", "file_size", "put_message_position_info",
    "_logics_timestamp", "arriving_listener", "_dispatch",
};
static PyObject *attr[A_COUNT]; /* interned */

#define CQ_UNIT_SIZE 20
#define TRAN_MASK 0xC
#define TRANSACTION_PREPARED_TYPE 0x4
#define TRANSACTION_ROLLBACK_TYPE 0xC

/* getattr(o, attr[a]) as a C integer: 1 when it is an int within long long, 0 when it is anything else (the
 * Python path decides), -1 with an exception set. */
static int
int_attr(PyObject *o, int a, long long *out)
{
    PyObject *v = PyObject_GetAttr(o, attr[a]);
    if (v == NULL)
        return -1;
    int ok = 0;
    if (PyLong_CheckExact(v)) {
        int overflow;
        *out = PyLong_AsLongLongAndOverflow(v, &overflow);
        ok = !overflow;
    }
    Py_DECREF(v);
    return ok;
}

/* The last item of the list getattr(o, attr[a]) (a new reference); NULL with no exception when the list is empty or
 * not a list. */
static PyObject *
last_of(PyObject *o, int a)
{
    PyObject *list = PyObject_GetAttr(o, attr[a]);
    if (list == NULL)
        return NULL;
    PyObject *last = NULL;
    if (PyList_CheckExact(list) && PyList_GET_SIZE(list) > 0)
        last = Py_NewRef(PyList_GET_ITEM(list, PyList_GET_SIZE(list) - 1));
    Py_DECREF(list);
    return last;
}

typedef struct {
    PyObject_HEAD
    PyObject *store;
    PyObject *on_listener_error;
    vectorcallfunc vectorcall;
} Dispatcher;

/* One record to dispatch: its commitlog offset, size, tags code and consume-queue offset, with the ints the Python
 * methods and the listener are called with (made when first needed), and its properties (borrowed). */
enum { R_PHY, R_SIZE, R_TAGS, R_CQ, R_N };
typedef struct {
    long long v[R_N];
    PyObject *o[R_N];
    PyObject *props;
} Rec;

static PyObject *
rec_int(Rec *r, int i)
{
    if (r->o[i] == NULL)
        r->o[i] = PyLong_FromLongLong(r->v[i]);
    return r->o[i];
}

/* setattr(o, attr[a], int v): 0, or -1 with an exception set. */
static int
set_int_attr(PyObject *o, int a, long long v)
{
    PyObject *x = PyLong_FromLongLong(v);
    int err = x == NULL ? -1 : PyObject_SetAttr(o, attr[a], x);
    Py_XDECREF(x);
    return err;
}

/* IndexService.build_index for each record: those whose keys fit in the current file written here (its header and
 * the service's last indexed offset set once), the rest by the Python method. 0, or -1 with an exception set. */
static int
index_records(PyObject *service, PyObject *topic, Rec *recs, Py_ssize_t n, PyObject *stamp_obj, long long stamp,
              PyObject *sys_flag_obj, long long sys_flag)
{
    long long last, slots, index_num, h[6], was[6];
    PyObject *f = NULL, *mapped = NULL, *mm = NULL;
    Py_ssize_t i = 0, last_done = -1;
    int result = -1, got = int_attr(service, A_LAST_INDEXED, &last);
    if (got < 0)
        return -1;
    if (got > 0 && (sys_flag & TRAN_MASK) == TRANSACTION_ROLLBACK_TYPE)
        return 0; /* build_index skips a rollback */
    if (got > 0 && (f = last_of(service, A_FILES)) == NULL && PyErr_Occurred())
        return -1;
    if (f != NULL) {
        got = int_attr(f, A_HASH_SLOT_NUM, &slots);
        if (got > 0)
            got = int_attr(f, A_INDEX_NUM, &index_num);
        for (int k = 0; k < 6 && got > 0; k++)
            got = int_attr(f, A_BEGIN_TS + k, &h[k]);
        if (got < 0 || (got > 0 && ((mapped = PyObject_GetAttr(f, attr[A_MAPPED_FILE])) == NULL ||
                                    (mm = PyObject_GetAttr(mapped, attr[A_MM])) == NULL)))
            goto out;
        memcpy(was, h, sizeof(h));
        for (; got > 0 && i < n; i++) {
            if (recs[i].v[R_PHY] <= last)
                continue; /* already indexed */
            int done = index_into(mm, slots, index_num, h, topic, recs[i].props, recs[i].v[R_PHY], stamp);
            if (done < 0)
                goto out;
            if (done == 0)
                break; /* the Python path fills this file and goes on in a new one */
            last = recs[i].v[R_PHY];
            last_done = i;
        }
        if (last_done >= 0) {
            /* IndexFile.put_message sets the whole header; the fields left as they were already hold their values. */
            for (int k = 0; k < 6; k++)
                if (h[k] != was[k] && set_int_attr(f, A_BEGIN_TS + k, h[k]) < 0)
                    goto out;
            PyObject *phy = rec_int(&recs[last_done], R_PHY);
            if (phy == NULL || PyObject_SetAttr(f, attr[A_DIRTY], Py_True) < 0 ||
                PyObject_SetAttr(service, attr[A_LAST_INDEXED], phy) < 0)
                goto out;
        }
    }
    for (; i < n; i++) {
        PyObject *phy = rec_int(&recs[i], R_PHY);
        if (phy == NULL)
            goto out;
        PyObject *call[] = {service, topic, phy, stamp_obj, sys_flag_obj, recs[i].props};
        PyObject *r = PyObject_VectorcallMethod(attr[A_BUILD_INDEX], call, 6 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (r == NULL)
            goto out;
        Py_DECREF(r);
    }
    result = 0;
out:
    Py_XDECREF(mm);
    Py_XDECREF(mapped);
    Py_XDECREF(f);
    return result;
}

/* ConsumeQueue.put_message_position_info for each record: the queue's next units in its current file written here
 * (its write position and max physic offset set once), the rest (a unit that rolls, leaves a gap or was written)
 * by the Python method. 0, or -1 with an exception set. */
static int
unit_records(PyObject *cq, Rec *recs, Py_ssize_t n)
{
    long long max_physic, wrote = 0, from, file_size;
    Py_ssize_t i = 0;
    int result = -1, wrote_any = 0, got = int_attr(cq, A_MAX_PHYSIC, &max_physic);
    PyObject *q = NULL, *f = NULL, *mm = NULL;
    Py_buffer view = {0};
    if (got < 0)
        return -1;
    if (got > 0) {
        if ((q = PyObject_GetAttr(cq, attr[A_QUEUE])) == NULL || (got = int_attr(q, A_WROTE_WHERE, &wrote)) < 0)
            goto out;
        if (got > 0 && (f = last_of(q, A_FILES)) == NULL && PyErr_Occurred())
            goto out;
        if (f != NULL && ((got = int_attr(f, A_FILE_FROM, &from)) < 0 ||
                          (got > 0 && (got = int_attr(f, A_FILE_SIZE, &file_size)) < 0)))
            goto out;
        if (f != NULL && got > 0) {
            if ((mm = PyObject_GetAttr(f, attr[A_MM])) == NULL || PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE) < 0)
                goto out;
            for (; i < n; i++) {
                long long end = recs[i].v[R_PHY] + recs[i].v[R_SIZE], expect = recs[i].v[R_CQ] * CQ_UNIT_SIZE;
                if (end <= max_physic)
                    continue; /* the queue already indexes it: the Python method does nothing either */
                if (expect != wrote || expect < from || expect - from > file_size - CQ_UNIT_SIZE ||
                    expect - from > view.len - CQ_UNIT_SIZE)
                    break; /* a gap, a unit written already or one in the next file: the Python method says so */
                unsigned char *u = (unsigned char *)view.buf + (expect - from);
                put64(u, recs[i].v[R_PHY]);
                put32(u + 8, recs[i].v[R_SIZE]);
                put64(u + 12, recs[i].v[R_TAGS]);
                wrote = expect + CQ_UNIT_SIZE;
                max_physic = end;
                wrote_any = 1;
            }
            PyBuffer_Release(&view);
        }
        if (wrote_any && (set_int_attr(q, A_WROTE_WHERE, wrote) < 0 || set_int_attr(cq, A_MAX_PHYSIC, max_physic) < 0))
            goto out;
    }
    for (; i < n; i++) {
        PyObject *call[] = {cq, rec_int(&recs[i], R_PHY), rec_int(&recs[i], R_SIZE), rec_int(&recs[i], R_TAGS),
                            rec_int(&recs[i], R_CQ)};
        if (call[1] == NULL || call[2] == NULL || call[3] == NULL || call[4] == NULL)
            goto out;
        PyObject *r = PyObject_VectorcallMethod(attr[A_PUT_POSITION], call, 5 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (r == NULL)
            goto out;
        Py_DECREF(r);
    }
    result = 0;
out:
    Py_XDECREF(mm);
    Py_XDECREF(f);
    Py_XDECREF(q);
    return result;
}

/* The listener's Exception to on_listener_error; anything else (KeyboardInterrupt...) goes on up. */
static int
listener_failed(Dispatcher *d)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL)
        PyException_SetTraceback(value, tb);
    PyObject *r = PyObject_CallOneArg(d->on_listener_error, value);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* DefaultMessageStore._dispatch for records of one topic's queue stored together (one store time, one sys flag):
 * the index, the consume queue, the logics timestamp, the arriving listener for each. 0, or -1 with an exception. */
static int
dispatch_records(Dispatcher *d, PyObject *topic, PyObject *queue, Rec *recs, Py_ssize_t n, PyObject *stamp_obj,
                 long long stamp, PyObject *sys_flag_obj, long long sys_flag)
{
    PyObject *store = d->store;
    PyObject *config = PyObject_GetAttr(store, attr[A_CONFIG]);
    if (config == NULL)
        return -1;
    PyObject *enabled = PyObject_GetAttr(config, attr[A_INDEX_ENABLE]);
    Py_DECREF(config);
    int index = enabled == NULL ? -1 : PyObject_IsTrue(enabled);
    Py_XDECREF(enabled);
    if (index < 0)
        return -1;
    if (index) {
        PyObject *service = PyObject_GetAttr(store, attr[A_INDEX_SERVICE]);
        if (service == NULL)
            return -1;
        int err = index_records(service, topic, recs, n, stamp_obj, stamp, sys_flag_obj, sys_flag);
        Py_DECREF(service);
        if (err < 0)
            return -1;
    }
    int tran = sys_flag & TRAN_MASK;
    if (tran == TRANSACTION_PREPARED_TYPE || tran == TRANSACTION_ROLLBACK_TYPE)
        return 0;
    PyObject *table = PyObject_GetAttr(store, attr[A_CQ_TABLE]);
    if (table == NULL)
        return -1;
    PyObject *cq = NULL;
    if (PyDict_CheckExact(table)) {
        PyObject *key = PyTuple_Pack(2, topic, queue);
        if (key == NULL) {
            Py_DECREF(table);
            return -1;
        }
        cq = Py_XNewRef(PyDict_GetItemWithError(table, key));
        Py_DECREF(key);
    }
    Py_DECREF(table);
    if (cq == NULL) {
        if (PyErr_Occurred())
            return -1;
        PyObject *call[] = {store, topic, queue};
        cq = PyObject_VectorcallMethod(attr[A_FIND_CQ], call, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (cq == NULL)
            return -1;
        if (cq == Py_None) {
            Py_DECREF(cq);
            return 0;
        }
    }
    int err = unit_records(cq, recs, n);
    Py_DECREF(cq);
    if (err < 0 || PyObject_SetAttr(store, attr[A_LOGICS_TS], stamp_obj) < 0)
        return -1;
    PyObject *listener = PyObject_GetAttr(store, attr[A_LISTENER]);
    if (listener == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < n && listener != Py_None; i++) {
        PyObject *call[] = {topic, queue, rec_int(&recs[i], R_CQ), rec_int(&recs[i], R_TAGS)};
        PyObject *r = call[2] == NULL || call[3] == NULL ? NULL : PyObject_Vectorcall(listener, call, 4, NULL);
        if (r == NULL && (call[2] == NULL || call[3] == NULL || listener_failed(d) < 0)) {
            Py_DECREF(listener);
            return -1;
        }
        Py_XDECREF(r);
    }
    Py_DECREF(listener);
    return 0;
}

static void
recs_clear(Rec *recs, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        for (int k = 0; k < R_N; k++)
            Py_CLEAR(recs[i].o[k]);
}

enum { D_TOPIC, D_QUEUE, D_OFFSET, D_SIZE, D_TAGS, D_CQ_OFFSET, D_STORE_TS, D_SYS_FLAG, D_PROPS, D_NARGS };

/* Whether a record's values are in their fields' ranges (as the commitlog passes them). */
static int
rec_in_range(const long long v[R_N])
{
    return v[R_PHY] >= 0 && v[R_PHY] <= INT64_MAX - INT32_MAX && v[R_SIZE] >= 0 && v[R_SIZE] <= INT32_MAX &&
           v[R_CQ] >= 0 && v[R_CQ] <= INT64_MAX / CQ_UNIT_SIZE - 1;
}

/* The nine arguments as the commitlog passes them (str, seven ints in their fields' ranges, str) into v; 0 when
 * they are anything else. */
static int
dispatch_args(PyObject *const *args, long long v[D_NARGS])
{
    if (!PyUnicode_CheckExact(args[D_TOPIC]) || !PyUnicode_CheckExact(args[D_PROPS]))
        return 0;
    for (int i = D_QUEUE; i <= D_SYS_FLAG; i++) {
        int overflow;
        if (!PyLong_CheckExact(args[i]))
            return 0;
        v[i] = PyLong_AsLongLongAndOverflow(args[i], &overflow);
        if (overflow)
            return 0;
    }
    return 1;
}

static PyObject *
dispatcher_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Dispatcher *d = (Dispatcher *)callable;
    long long v[D_NARGS];
    Rec rec = {0};
    if (kwnames == NULL && PyVectorcall_NARGS(nargsf) == D_NARGS && dispatch_args(args, v)) {
        rec = (Rec){.v = {v[D_OFFSET], v[D_SIZE], v[D_TAGS], v[D_CQ_OFFSET]},
                    .o = {Py_NewRef(args[D_OFFSET]), Py_NewRef(args[D_SIZE]), Py_NewRef(args[D_TAGS]),
                          Py_NewRef(args[D_CQ_OFFSET])},
                    .props = args[D_PROPS]};
        if (!rec_in_range(rec.v))
            recs_clear(&rec, 1);
    }
    if (rec.o[R_PHY] == NULL) {
        PyObject *dispatch = PyObject_GetAttr(d->store, attr[A_DISPATCH]);
        if (dispatch == NULL)
            return NULL;
        PyObject *r = PyObject_Vectorcall(dispatch, args, nargsf, kwnames);
        Py_DECREF(dispatch);
        return r;
    }
    int err = dispatch_records(d, args[D_TOPIC], args[D_QUEUE], &rec, 1, args[D_STORE_TS], v[D_STORE_TS],
                               args[D_SYS_FLAG], v[D_SYS_FLAG]);
    recs_clear(&rec, 1);
    if (err < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* dispatch_run(topic, queue_id, first_cq_offset, store_timestamp, sys_flag, units, properties): what calling the
 * dispatcher for each record of a batch does (records of one queue at consecutive queue offsets, one store time and
 * sys flag), with the files' and queue's state read and set once. `units` holds each record's commitlog offset, size
 * and tags code as three native int64; `properties` each one's properties. */
static PyObject *
dispatcher_run(Dispatcher *d, PyObject *const *args, Py_ssize_t nargs)
{
    long long first, stamp, sys_flag;
    if (nargs != 7 || !PyUnicode_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) || !PyBytes_CheckExact(args[5]) ||
        !PyList_CheckExact(args[6])) {
        PyErr_SetString(PyExc_TypeError, "dispatch_run(topic, queue_id, first_cq_offset, store_timestamp, sys_flag, "
                                         "units: bytes, properties: list)");
        return NULL;
    }
    if ((first = PyLong_AsLongLong(args[2])) == -1 && PyErr_Occurred())
        return NULL;
    if ((stamp = PyLong_AsLongLong(args[3])) == -1 && PyErr_Occurred())
        return NULL;
    if ((sys_flag = PyLong_AsLongLong(args[4])) == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(args[6]);
    if (PyBytes_GET_SIZE(args[5]) != n * 3 * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "dispatch_run: three int64 a record in units");
        return NULL;
    }
    Rec *recs = PyMem_Calloc(n ? n : 1, sizeof(Rec));
    if (recs == NULL)
        return PyErr_NoMemory();
    const char *units = PyBytes_AS_STRING(args[5]);
    int err = 0;
    for (Py_ssize_t i = 0; i < n && err == 0; i++) {
        int64_t u[3];
        memcpy(u, units + i * sizeof(u), sizeof(u));
        recs[i].v[R_PHY] = u[0];
        recs[i].v[R_SIZE] = u[1];
        recs[i].v[R_TAGS] = u[2];
        recs[i].v[R_CQ] = first + i;
        recs[i].props = PyList_GET_ITEM(args[6], i);
        if (!PyUnicode_CheckExact(recs[i].props) || !rec_in_range(recs[i].v)) {
            PyErr_SetString(PyExc_ValueError, "dispatch_run: a record out of range, or properties not a str");
            err = -1;
        }
    }
    if (err == 0)
        err = dispatch_records(d, args[0], args[1], recs, n, args[3], stamp, args[4], sys_flag);
    recs_clear(recs, n);
    PyMem_Free(recs);
    if (err < 0)
        return NULL;
    Py_RETURN_NONE;
}

static int
dispatcher_init(Dispatcher *d, PyObject *args, PyObject *kwds)
{
    PyObject *store, *on_listener_error;
    if (!PyArg_ParseTuple(args, "OO:Dispatcher", &store, &on_listener_error))
        return -1;
    Py_XSETREF(d->store, Py_NewRef(store));
    Py_XSETREF(d->on_listener_error, Py_NewRef(on_listener_error));
    d->vectorcall = dispatcher_vectorcall;
    return 0;
}

static int
dispatcher_traverse(Dispatcher *d, visitproc visit, void *arg)
{
    Py_VISIT(d->store);
    Py_VISIT(d->on_listener_error);
    return 0;
}

static int
dispatcher_clear(Dispatcher *d)
{
    Py_CLEAR(d->store);
    Py_CLEAR(d->on_listener_error);
    return 0;
}

static void
dispatcher_dealloc(Dispatcher *d)
{
    PyObject_GC_UnTrack(d);
    dispatcher_clear(d);
    Py_TYPE(d)->tp_free((PyObject *)d);
}

static PyObject *
dispatcher_call(PyObject *callable, PyObject *args, PyObject *kwargs)
{
    if (((Dispatcher *)callable)->store == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Dispatcher is not initialised");
        return NULL;
    }
    return PyVectorcall_Call(callable, args, kwargs);
}

static PyMethodDef dispatcher_methods[] = {
    {"dispatch_run", (PyCFunction)(void (*)(void))dispatcher_run, METH_FASTCALL,
     "dispatch_run(topic, queue_id, first_cq_offset, store_timestamp, sys_flag, units, properties): a batch's "
     "records dispatched as one call a record would."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DispatcherType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gateway.store._store.Dispatcher",
    .tp_doc = "Dispatcher(store, on_listener_error): the commitlog's dispatcher, DefaultMessageStore._dispatch in C "
              "for the common case.",
    .tp_basicsize = sizeof(Dispatcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Dispatcher, vectorcall),
    .tp_call = dispatcher_call,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)dispatcher_init,
    .tp_traverse = (traverseproc)dispatcher_traverse,
    .tp_clear = (inquiry)dispatcher_clear,
    .tp_dealloc = (destructor)dispatcher_dealloc,
    .tp_methods = dispatcher_methods,
};

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
        notify_reactor(t->notify_fd);
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
    if (start_thread(&t->thread, fsync_thread_run, t, "commitlog-fsync") < 0) {
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
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
    stop_thread(t->thread, &t->mu, &t->cv, &t->stopping); /* after the request it is running, if any */
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

static int64_t
be64(const unsigned char *p)
{
    return (int64_t)(((uint64_t)(uint32_t)get32(p) << 32) | (uint32_t)get32(p + 4));
}

/* a - b > c on int64 values as Python's integers compare (no overflow). */
static int
difference_exceeds(int64_t a, int64_t b, int64_t c)
{
    int64_t d;
    if (__builtin_sub_overflow(a, b, &d))
        return b < 0; /* a - b beyond int64: huge positive when b < 0, huge negative otherwise */
    return d > c;
}

/* The segment window being read: a buffer on a slice only this call owns, released before the next lookup (which
 * may map another file and unmap this one) and before returning. */
typedef struct {
    Py_buffer view;
    int64_t base;
    int held;
} Window;

static void
window_release(Window *w)
{
    if (w->held) {
        PyBuffer_Release(&w->view);
        w->held = 0;
    }
}

/* segment_at(offset) -> (base, memoryview) or None, into `w`; 0 when there is none, -1 on error. */
static int
window_lookup(Window *w, PyObject *segment_at, int64_t offset)
{
    window_release(w);
    PyObject *seg = PyObject_CallFunction(segment_at, "L", (long long)offset);
    if (seg == NULL)
        return -1;
    if (seg == Py_None) {
        Py_DECREF(seg);
        return 0;
    }
    if (!PyTuple_Check(seg) || PyTuple_GET_SIZE(seg) != 2) {
        Py_DECREF(seg);
        PyErr_SetString(PyExc_TypeError, "segment_at must return (base, memoryview) or None");
        return -1;
    }
    long long base = PyLong_AsLongLong(PyTuple_GET_ITEM(seg, 0));
    if ((base == -1 && PyErr_Occurred()) || PyObject_GetBuffer(PyTuple_GET_ITEM(seg, 1), &w->view, PyBUF_SIMPLE) < 0) {
        Py_DECREF(seg);
        return -1;
    }
    Py_DECREF(seg);
    w->base = base;
    w->held = 1;
    return 1;
}

/* read_units(units, max_msg_nums, commitlog_max_offset, memory, mem_bytes, mem_count, disk_bytes, disk_count,
 * message_filter, segment_at, roll_next_file) -> (records, total_size, scanned, max_phy_offset_pulling, removing):
 * message_store.py's _read_units loop over consume-queue units (offset: 8, size: 4, tagsCode: 8), each record
 * copied out of its segment's mapping into a bytes object. message_filter(tagsCode) is called per unit when not
 * None; segment_at(offset) gives the readable window of the segment holding offset, called only when a unit
 * leaves the current one; roll_next_file(offset) only when a record is missing. */
enum { R_UNITS, R_MAX_NUMS, R_MAX_OFFSET, R_MEMORY, R_MEM_BYTES, R_MEM_COUNT, R_DISK_BYTES, R_DISK_COUNT, R_FILTER,
       R_SEGMENT_AT, R_ROLL, R_NARGS };

static PyObject *
read_units(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != R_NARGS) {
        PyErr_SetString(PyExc_TypeError, "read_units takes 11 arguments");
        return NULL;
    }
    long long lim[R_DISK_COUNT + 1];
    for (int i = R_MAX_NUMS; i <= R_DISK_COUNT; i++)
        if ((lim[i] = PyLong_AsLongLong(args[i])) == -1 && PyErr_Occurred())
            return NULL;
    long long max_nums = lim[R_MAX_NUMS];
    PyObject *filter = args[R_FILTER] == Py_None ? NULL : args[R_FILTER];
    Py_buffer units;
    if (PyObject_GetBuffer(args[R_UNITS], &units, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *records = PyList_New(0);
    if (records == NULL) {
        PyBuffer_Release(&units);
        return NULL;
    }
    /* Java scans at most max(16000, maxMsgNums * 20) bytes of consume queue. */
    long long scan = max_nums > 16000 / 20 ? (max_nums > INT32_MAX ? (long long)INT32_MAX * 20 : max_nums * 20) : 16000;
    Py_ssize_t n = (Py_ssize_t)((units.len < scan ? units.len : scan) / 20);
    const unsigned char *u = units.buf;
    Window w = {.held = 0};
    int64_t next_file_start = -1, max_phy = 0, total = 0, count = 0, scanned = 0;
    int skip_all = 0;
    int removing = 0;
    for (Py_ssize_t i = 0; i < n; i++, u += 20) {
        int64_t offset = be64(u);
        int32_t size = get32(u + 8);
        max_phy = offset;
        if (offset < next_file_start || skip_all || size == INT32_MAX) { /* a blank unit */
            scanned++;
            continue;
        }
        if (total != 0 && count != 0) { /* _is_the_batch_full */
            int in_disk = difference_exceeds(lim[R_MAX_OFFSET], offset, lim[R_MEMORY]);
            long long max_bytes = in_disk ? lim[R_DISK_BYTES] : lim[R_MEM_BYTES];
            long long max_count = in_disk ? lim[R_DISK_COUNT] : lim[R_MEM_COUNT];
            if (count >= max_nums || total + size > max_bytes || count >= max_count)
                break;
        }
        scanned++;
        if (filter != NULL) {
            PyObject *tags = PyLong_FromLongLong(be64(u + 12));
            PyObject *keep = tags == NULL ? NULL : PyObject_CallOneArg(filter, tags);
            Py_XDECREF(tags);
            int truth = keep == NULL ? -1 : PyObject_IsTrue(keep);
            Py_XDECREF(keep);
            if (truth < 0)
                goto error;
            if (!truth)
                continue;
        }
        int found = 0;
        if (offset >= 0 && size > 0) {
            if (!w.held || offset < w.base || offset - w.base >= w.view.len) {
                if (window_lookup(&w, args[R_SEGMENT_AT], offset) < 0)
                    goto error;
            }
            found = w.held && offset >= w.base && offset - w.base < w.view.len && size <= w.view.len - (offset - w.base);
        }
        if (!found) {
            removing = 1;
            PyObject *next = PyObject_CallFunction(args[R_ROLL], "L", (long long)offset);
            int overflow = 0;
            long long start = next == NULL ? -1 : PyLong_AsLongLongAndOverflow(next, &overflow);
            Py_XDECREF(next);
            if (start == -1 && PyErr_Occurred())
                goto error;
            /* Past the last segment a hostile offset can name, the next file starts beyond every int64 offset. */
            skip_all = overflow > 0;
            next_file_start = overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : start;
            continue;
        }
        PyObject *record = PyBytes_FromStringAndSize((const char *)w.view.buf + (offset - w.base), size);
        if (record == NULL || PyList_Append(records, record) < 0) {
            Py_XDECREF(record);
            goto error;
        }
        Py_DECREF(record);
        total += size;
        count++;
        next_file_start = -1;
    }
    window_release(&w);
    PyBuffer_Release(&units);
    return Py_BuildValue("(NLLLO)", records, (long long)total, (long long)scanned, (long long)max_phy,
                         removing ? Py_True : Py_False);
error:
    window_release(&w);
    PyBuffer_Release(&units);
    Py_DECREF(records);
    return NULL;
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

/* crc32(data, value=0) -> int: zlib.crc32(data, value) by crc32.h (for the tests, and Python code that checks
 * record bodies). */
static PyObject *
store_crc32(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32(data, value=0)");
        return NULL;
    }
    unsigned long value = 0;
    if (nargs == 2 && (value = PyLong_AsUnsignedLongMask(args[1])) == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc = crc32_update((uint32_t)value, (const unsigned char *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"crc32", (PyCFunction)(void (*)(void))store_crc32, METH_FASTCALL,
     "crc32(data, value=0) -> int: zlib.crc32, folded with carry-less multiplication where the CPU has it."},
    {"write_record", (PyCFunction)(void (*)(void))store_write_record, METH_FASTCALL,
     "write_record(mm, pos, size, magic, crc, topic, ...): a v1 commitlog record into the mapping."},
    {"parse_record", (PyCFunction)(void (*)(void))parse_record, METH_FASTCALL,
     "parse_record(view, pos, file_from_offset) -> fields of the record at pos, None (blank) or what is wrong."},
    {"index_message", (PyCFunction)(void (*)(void))index_message, METH_FASTCALL,
     "index_message(mm, hash_slot_num, index_num, header, topic, properties, phy_offset, store_timestamp) -> header."},
    {"read_units", (PyCFunction)(void (*)(void))read_units, METH_FASTCALL,
     "read_units(units, max_msg_nums, ..., message_filter, segment_at, roll_next_file) -> records and counts."},
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
    crc32_init();
    if (StructError == NULL || PyType_Ready(&FsyncThreadType) < 0 || PyType_Ready(&DispatcherType) < 0)
        return NULL;
    for (int i = 0; i < A_COUNT; i++)
        if (attr[i] == NULL && (attr[i] = PyUnicode_InternFromString(attr_names[i])) == NULL)
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
    Py_INCREF(&DispatcherType);
    if (PyModule_AddObject(m, "Dispatcher", (PyObject *)&DispatcherType) < 0) {
        Py_DECREF(&DispatcherType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
