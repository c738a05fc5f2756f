/* The send lane: the common SEND_MESSAGE / SEND_MESSAGE_V2 answered in C, one call for a read's requests.
 *
 * A plain message or batch (no transaction, delay, timer or retry topic, not oneway) to a topic the broker
 * already has, on a master whose store takes it, is validated as SendMessageProcessor.msg_check validates it,
 * written into the commitlog's current segment as CommitLog.put_message writes it, dispatched by the commitlog's
 * own dispatcher, counted, and answered with the bytes SendMessageProcessor would have sent. Anything else (a field
 * that is not plainly valid, a new topic, a segment to roll, an error to report) is left to the Python processor,
 * which is the reference: the lane only takes what Python would store and answer SUCCESS, and stops at the first
 * request it does not take so that requests are served in order. send_lane.py builds the lane and serves SYNC_FLUSH
 * waits. With the RPC latency histograms on (a metrics exporter), each send it answers is counted in them as the
 * dispatcher counts one; with request hooks on (ACL), a send is first put to them by RequestDispatcher.admit, and
 * only decoded commands are taken (the hooks read the command). The GIL is held throughout: the lane reads and
 * updates the same Python objects the processor does.
 */
#include "../remoting/send_frame.h"
#include "../store/record.h"
#include "../store/crc32.h"

#include <time.h>

/* Interned attribute and key names. */
#define NAMES(X)                                                                                                     \
    X(code) X(flag) X(opaque) X(ext_fields) X(body) X(serialize_type) X(startAcceptSendRequestTimeStamp)            \
    X(brokerPermission) X(put_refused) X(put_waiter) X(table) X(perm) X(write_queue_nums) X(read_queue_nums)         \
    X(topic_filter_type) X(topic_queue_table) X(_topic_bytes) X(maxMessageSize) X(files) X(wrote_where)             \
    X(end_offset) X(file_from_offset) X(file_size) X(mm) X(_warm_at) X(_warm) X(tail) X(dispatcher) X(_writable)            \
    X(dispatch_run) X(attributes) X(born_host) X(hooks) X(rpc_latency) X(store_host) X(buckets) X(entry) X(admit)
#define DECLARE(n) static PyObject *S_##n;
NAMES(DECLARE)
static PyObject *MultiTag; /* "MULTI_TAG" */
static PyObject *EmptyStr;
static PyObject *Markers[3]; /* what makes a send not plain: a delay, a timer, a transaction */

#define REQUEST_SEND_MESSAGE 10
#define REQUEST_SEND_MESSAGE_V2 310
#define REQUEST_SEND_BATCH_MESSAGE 320
#define RPC_TYPE_RESPONSE 1
#define RPC_ONEWAY 2
#define PERM_WRITE 0x2
#define MULTI_TAGS_FLAG 0x8
#define TRANSACTION_MASK 0xC
#define HOST_V6_FLAGS 0x30 /* BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG */
#define BORNHOST_V6_FLAG 0x10
#define STOREHOSTADDRESS_V6_FLAG 0x20
#define END_FILE_MIN_BLANK_LENGTH 8
#define MAX_TOPIC_LENGTH 127
#define MAX_PROPERTIES_LENGTH 32767
#define MAX_BUCKETS 16

/* The header's fields: SEND_MESSAGE_V2's one-letter keys and SEND_MESSAGE's names (headers.py's V2_NAMES). */
enum { F_GROUP, F_TOPIC, F_DEFAULT_TOPIC, F_DEFAULT_QUEUES, F_QUEUE_ID, F_SYS_FLAG, F_BORN_TS, F_FLAG, F_PROPERTIES,
       F_RECONSUME, F_UNIT_MODE, F_MAX_RECONSUME, F_BATCH, N_FIELDS };
static const char *const V2Keys[N_FIELDS] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m"};
static const char *const V1Keys[N_FIELDS] = {
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp", "flag",
    "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch"};
static PyObject *KeysV2[N_FIELDS], *KeysV1[N_FIELDS];

typedef struct {
    PyObject_HEAD
    /* What the lane reads, set once by send_lane.py (see Lane's docstring for each). */
    PyObject *config, *broker, *dispatcher, *store, *commit_log, *file_queue, *topics, *store_config, *count_put, *send_properties,
        *known_topics, *known_groups, *not_allowed, *retry_prefix, *cluster, *wait_stored,
        *serialize_rocketmq, *region, *trace_on, *json_pieces, *batch, *batch_properties;
    long long mapped_file_size;
    int version;
    /* The last batch header's properties (a str or None) and what batch_properties made of them: a producer's
     * batches mostly carry the same ones. */
    PyObject *last_batch_props, *last_batch_str;
    /* Requests taken, and of them those read in place and the batches, for tests and the benchmarks. */
    unsigned long long taken, in_place, batches;
} Lane;

static void
lane_clear_refs(Lane *self)
{
    Py_CLEAR(self->config);
    Py_CLEAR(self->broker);
    Py_CLEAR(self->dispatcher);
    Py_CLEAR(self->store);
    Py_CLEAR(self->commit_log);
    Py_CLEAR(self->file_queue);
    Py_CLEAR(self->topics);
    Py_CLEAR(self->store_config);
    Py_CLEAR(self->count_put);
    Py_CLEAR(self->send_properties);
    Py_CLEAR(self->known_topics);
    Py_CLEAR(self->known_groups);
    Py_CLEAR(self->not_allowed);
    Py_CLEAR(self->retry_prefix);
    Py_CLEAR(self->cluster);
    Py_CLEAR(self->wait_stored);
    Py_CLEAR(self->serialize_rocketmq);
    Py_CLEAR(self->region);
    Py_CLEAR(self->trace_on);
    Py_CLEAR(self->json_pieces);
    Py_CLEAR(self->batch);
    Py_CLEAR(self->batch_properties);
    Py_CLEAR(self->last_batch_props);
    Py_CLEAR(self->last_batch_str);
}

static int
lane_init(Lane *self, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"config", "broker", "dispatcher", "store", "commit_log", "file_queue", "topics", "store_config",
                         "count_put", "send_properties", "known_topics", "known_groups", "not_allowed",
                         "retry_prefix", "cluster", "wait_stored", "serialize_rocketmq", "region",
                         "trace_on", "json_pieces", "batch", "batch_properties", "mapped_file_size", "version", NULL};
    PyObject *o[22];
    long long mapped_file_size;
    int version;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$OOOOOOOOOOO!O!O!UUOOO!O!O!OOLi", kw, &o[0], &o[1], &o[2], &o[3],
                                     &o[4], &o[5], &o[6], &o[7], &o[8], &o[9], &PySet_Type, &o[10], &PySet_Type,
                                     &o[11], &PyFrozenSet_Type, &o[12], &o[13], &o[14], &o[15], &o[16], &PyBytes_Type,
                                     &o[17], &PyBytes_Type, &o[18], &PyTuple_Type, &o[19], &o[20], &o[21],
                                     &mapped_file_size, &version))
        return -1;
    if (PyTuple_GET_SIZE(o[19]) != 5) {
        PyErr_SetString(PyExc_ValueError, "json_pieces: five byte strings");
        return -1;
    }
    for (int i = 0; i < 5; i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(o[19], i))) {
            PyErr_SetString(PyExc_TypeError, "json_pieces: five byte strings");
            return -1;
        }
    lane_clear_refs(self);
    PyObject **slots[] = {&self->config, &self->broker, &self->dispatcher, &self->store, &self->commit_log, &self->file_queue,
                          &self->topics, &self->store_config, &self->count_put, &self->send_properties,
                          &self->known_topics, &self->known_groups, &self->not_allowed, &self->retry_prefix,
                          &self->cluster, &self->wait_stored, &self->serialize_rocketmq,
                          &self->region, &self->trace_on, &self->json_pieces, &self->batch,
                          &self->batch_properties};
    for (int i = 0; i < 22; i++)
        *slots[i] = Py_NewRef(o[i]);
    self->mapped_file_size = mapped_file_size;
    self->version = version;
    return 0;
}

static void
lane_dealloc(Lane *self)
{
    lane_clear_refs(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A str of 1..18 ASCII digits (what the codec's header decoder reads without Python) as *out; 0 for anything else,
 * which the lane leaves to Python. */
static int
plain_decimal(PyObject *v, long long *out)
{
    if (v == NULL || !PyUnicode_CheckExact(v) || !PyUnicode_IS_ASCII(v))
        return 0;
    return sf_digits(PyUnicode_1BYTE_DATA(v), PyUnicode_GET_LENGTH(v), out);
}

static int
plain_int32(PyObject *v, int32_t *out)
{
    long long x;
    if (!plain_decimal(v, &x) || x > INT32_MAX)
        return 0;
    *out = (int32_t)x;
    return 1;
}

/* An attribute as a C long long (0 with an exception set, or *ok = 0 if it is not an int). */
static int
attr_ll(PyObject *o, PyObject *name, long long *out)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return -1;
    int overflow = 0;
    long long x = PyLong_Check(v) ? PyLong_AsLongLongAndOverflow(v, &overflow) : 0;
    int ok = PyLong_Check(v) && !overflow && !(x == -1 && PyErr_Occurred());
    Py_DECREF(v);
    if (PyErr_Occurred())
        return -1;
    *out = x;
    return ok;
}

static const char Hex[] = "0123456789ABCDEF";

/* The response frame: header in the request's encoding, no body. */
static PyObject *
reply_frame(Lane *self, int rocketmq, int32_t opaque, const char *msg_id, Py_ssize_t msg_id_len, int32_t queue_id,
            long long queue_offset)
{
    char qid[16], qoff[24], op[16];
    int qid_len = snprintf(qid, sizeof qid, "%d", queue_id);
    int qoff_len = snprintf(qoff, sizeof qoff, "%lld", queue_offset);
    PyObject *frame;
    unsigned char *out;
    if (rocketmq) {
        /* code, language JAVA (0), version, opaque, flag, no remark, extFields in the processor's order. */
        Py_ssize_t rlen = PyBytes_GET_SIZE(self->region), tlen = PyBytes_GET_SIZE(self->trace_on);
        Py_ssize_t ext = (2 + 10 + 4 + rlen) + (2 + 8 + 4 + tlen) + (2 + 5 + 4 + msg_id_len) + (2 + 7 + 4 + qid_len) +
                         (2 + 11 + 4 + qoff_len);
        Py_ssize_t header = 13 + 4 + 4 + ext;
        if ((frame = PyBytes_FromStringAndSize(NULL, 8 + header)) == NULL)
            return NULL;
        out = (unsigned char *)PyBytes_AS_STRING(frame);
        put32(out, 4 + header);
        put32(out + 4, (1u << 24) | (uint32_t)header);
        out += 8;
        put16(out, 0);
        out[2] = 0;
        put16(out + 3, self->version);
        put32(out + 5, opaque);
        put32(out + 9, RPC_TYPE_RESPONSE);
        put32(out + 13, 0);
        put32(out + 17, ext);
        out += 21;
        const struct { const char *k; Py_ssize_t kl; const char *v; Py_ssize_t vl; } e[5] = {
            {"MSG_REGION", 10, PyBytes_AS_STRING(self->region), rlen},
            {"TRACE_ON", 8, PyBytes_AS_STRING(self->trace_on), tlen},
            {"msgId", 5, msg_id, msg_id_len},
            {"queueId", 7, qid, qid_len},
            {"queueOffset", 11, qoff, qoff_len},
        };
        for (int i = 0; i < 5; i++) {
            put16(out, e[i].kl);
            memcpy(out + 2, e[i].k, e[i].kl);
            out += 2 + e[i].kl;
            put32(out, e[i].vl);
            memcpy(out + 4, e[i].v, e[i].vl);
            out += 4 + e[i].vl;
        }
        return frame;
    }
    /* JSON: the processor's header cut by send_lane.py where msgId, queueId, queueOffset and opaque go. */
    int op_len = snprintf(op, sizeof op, "%d", opaque);
    PyObject *const *p = &PyTuple_GET_ITEM(self->json_pieces, 0);
    const char *parts[9] = {PyBytes_AS_STRING(p[0]), msg_id, PyBytes_AS_STRING(p[1]), qid, PyBytes_AS_STRING(p[2]),
                            qoff, PyBytes_AS_STRING(p[3]), op, PyBytes_AS_STRING(p[4])};
    Py_ssize_t lens[9] = {PyBytes_GET_SIZE(p[0]), msg_id_len, PyBytes_GET_SIZE(p[1]), qid_len, PyBytes_GET_SIZE(p[2]),
                          qoff_len, PyBytes_GET_SIZE(p[3]), op_len, PyBytes_GET_SIZE(p[4])};
    Py_ssize_t header = 0;
    for (int i = 0; i < 9; i++)
        header += lens[i];
    if ((frame = PyBytes_FromStringAndSize(NULL, 8 + header)) == NULL)
        return NULL;
    out = (unsigned char *)PyBytes_AS_STRING(frame);
    put32(out, 4 + header);
    put32(out + 4, header);
    out += 8;
    for (int i = 0; i < 9; i++) {
        memcpy(out, parts[i], lens[i]);
        out += lens[i];
    }
    return frame;
}

/* What one read's requests share: the broker's gates, read once a take() (nothing a request runs changes them
 * before the lane's next request: the processor that could is Python, and the lane stops before it). */
typedef struct {
    PyObject *topic_table;     /* topics.table */
    PyObject *queue_table;     /* commit_log.topic_queue_table */
    PyObject *topic_bytes;     /* commit_log._topic_bytes */
    PyObject *store_host;      /* broker.store_host: set once the broker listens */
    PyObject *admit;           /* dispatcher.admit while request hooks (ACL) are on, else NULL */
    PyObject *latency;         /* dispatcher.rpc_latency (Histograms), or NULL when off */
    PyObject *counted[3];      /* its entry (counts, sum) for a SUCCESS of SEND_MESSAGE, _V2, BATCH, once looked up */
    double buckets[MAX_BUCKETS];
    int n_buckets;
    long long max_message_size;
    int waits;                 /* a put waiter is set (SYNC_FLUSH, SYNC_MASTER) */
    int state;                 /* 0 not read yet, 1 the broker takes plain sends, 2 it does not */
} Gates;

/* The RPC latency histograms, when on: 1 (g->latency set, or left NULL when off), 0 when their buckets are not
 * what the lane can count into (Python then counts), -1 with an exception. */
static int
read_latency(Lane *self, Gates *g)
{
    PyObject *latency = PyObject_GetAttr(self->dispatcher, S_rpc_latency);
    if (latency == NULL)
        return -1;
    if (latency == Py_None) {
        Py_DECREF(latency);
        return 1;
    }
    g->latency = latency;
    PyObject *buckets = PyObject_GetAttr(latency, S_buckets);
    if (buckets == NULL)
        return -1;
    int ok = PyTuple_CheckExact(buckets) && PyTuple_GET_SIZE(buckets) <= MAX_BUCKETS;
    for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(buckets); i++) {
        PyObject *b = PyTuple_GET_ITEM(buckets, i);
        ok = PyFloat_CheckExact(b);
        if (ok)
            g->buckets[i] = PyFloat_AS_DOUBLE(b);
    }
    if (ok)
        g->n_buckets = (int)PyTuple_GET_SIZE(buckets);
    Py_DECREF(buckets);
    return ok;
}

/* Count one answered send as RequestDispatcher.count_latency does: key (code, SUCCESS, not oneway, not long
 * polling), `ms` into the first bucket at or above it (bisect_left), and into the sum. 0, or -1 with an exception. */
static int
count_latency(Gates *g, int32_t code, double ms)
{
    int v2 = code == REQUEST_SEND_BATCH_MESSAGE ? 2 : code == REQUEST_SEND_MESSAGE_V2;
    PyObject *entry = g->counted[v2];
    if (entry == NULL) {
        PyObject *key = Py_BuildValue("(iiOO)", code, 0, Py_False, Py_False);
        if (key == NULL)
            return -1;
        entry = PyObject_CallMethodOneArg(g->latency, S_entry, key);
        Py_DECREF(key);
        if (entry == NULL)
            return -1;
        g->counted[v2] = entry;
    }
    PyObject *counts, *sum;
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2 ||
        !PyList_CheckExact(counts = PyTuple_GET_ITEM(entry, 0)) || PyList_GET_SIZE(counts) != g->n_buckets + 1 ||
        !PyList_CheckExact(sum = PyTuple_GET_ITEM(entry, 1)) || PyList_GET_SIZE(sum) != 1) {
        PyErr_SetString(PyExc_TypeError, "rpc_latency.entry(): ([count per bucket, then past the last], [sum])");
        return -1;
    }
    int i = 0;
    while (i < g->n_buckets && g->buckets[i] < ms)
        i++;
    long long n = PyLong_AsLongLong(PyList_GET_ITEM(counts, i));
    double total = PyFloat_AsDouble(PyList_GET_ITEM(sum, 0));
    if ((n == -1 || total == -1.0) && PyErr_Occurred())
        return -1;
    PyObject *n_obj = PyLong_FromLongLong(n + 1);
    if (n_obj == NULL)
        return -1;
    PyList_SetItem(counts, i, n_obj);
    PyObject *total_obj = PyFloat_FromDouble(total + ms);
    if (total_obj == NULL)
        return -1;
    PyList_SetItem(sum, 0, total_obj);
    return 0;
}

static inline double
monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* 1: the broker takes plain sends now (as msg_check and DefaultMessageStore._writable decide); 0: Python decides;
 * -1: an exception. */
static int
read_gates(Lane *self, Gates *g)
{
    long long v;
    int ok = attr_ll(self->config, S_startAcceptSendRequestTimeStamp, &v);
    if (ok <= 0 || v != 0)
        return ok < 0 ? -1 : 0;
    if ((ok = attr_ll(self->config, S_brokerPermission, &v)) <= 0 || !(v & PERM_WRITE))
        return ok < 0 ? -1 : 0;
    PyObject *hooks = PyObject_GetAttr(self->dispatcher, S_hooks);
    if (hooks == NULL)
        return -1;
    Py_ssize_t n_hooks = PyList_Check(hooks) ? PyList_GET_SIZE(hooks) : 1;
    Py_DECREF(hooks);
    if (n_hooks && (g->admit = PyObject_GetAttr(self->dispatcher, S_admit)) == NULL)
        return -1;
    if ((ok = read_latency(self, g)) <= 0)
        return ok;
    PyObject *refused = PyObject_GetAttr(self->broker, S_put_refused);
    if (refused == NULL)
        return -1;
    Py_DECREF(refused);
    if (refused != Py_None)
        return 0;
    PyObject *writable = PyObject_CallMethodNoArgs(self->store, S__writable);
    if (writable == NULL)
        return -1;
    int w = PyObject_IsTrue(writable);
    Py_DECREF(writable);
    if (w <= 0)
        return w;
    PyObject *waiter = PyObject_GetAttr(self->broker, S_put_waiter);
    if (waiter == NULL)
        return -1;
    g->waits = waiter != Py_None;
    Py_DECREF(waiter);
    if ((ok = attr_ll(self->store_config, S_maxMessageSize, &g->max_message_size)) <= 0)
        return ok;
    if ((g->store_host = PyObject_GetAttr(self->broker, S_store_host)) == NULL)
        return -1;
    Py_ssize_t host_len = PyBytes_Check(g->store_host) ? PyBytes_GET_SIZE(g->store_host) : 0;
    if (host_len != 8 && host_len != 20)
        return 0;
    if ((g->topic_table = PyObject_GetAttr(self->topics, S_table)) == NULL)
        return -1;
    if ((g->queue_table = PyObject_GetAttr(self->commit_log, S_topic_queue_table)) == NULL ||
        (g->topic_bytes = PyObject_GetAttr(self->commit_log, S__topic_bytes)) == NULL)
        return -1;
    if (!PyDict_CheckExact(g->topic_table) || !PyDict_CheckExact(g->queue_table) || !PyDict_CheckExact(g->topic_bytes))
        return 0;
    return 1;
}

static void
release_gates(Gates *g)
{
    Py_XDECREF(g->store_host);
    Py_XDECREF(g->topic_table);
    Py_XDECREF(g->queue_table);
    Py_XDECREF(g->topic_bytes);
    Py_XDECREF(g->admit);
    Py_XDECREF(g->latency);
    Py_XDECREF(g->counted[0]);
    Py_XDECREF(g->counted[1]);
    Py_XDECREF(g->counted[2]);
}

/* The gates, read at the first send a call serves (a read of pulls or heartbeats never reads them): 1 open, 0 closed,
 * -1 with an exception. */
static int
gates_open(Lane *self, Gates *g)
{
    if (g->state == 0) {
        int ok = read_gates(self, g);
        if (ok < 0)
            return -1;
        g->state = ok ? 1 : 2;
    }
    return g->state == 1;
}

/* The segment the next record goes into, as CommitLog._reserve finds it without rolling: 1 with *f (a new
 * reference), *mm (the segment's mapping, held) and *pos; 0 when Python must roll or create a segment. */
static int
current_segment(Lane *self, long long size, PyObject **f_out, Py_buffer *mm, long long *pos, long long *wrote)
{
    PyObject *files = PyObject_GetAttr(self->file_queue, S_files);
    if (files == NULL)
        return -1;
    if (!PyList_CheckExact(files) || PyList_GET_SIZE(files) == 0) {
        Py_DECREF(files);
        return 0;
    }
    PyObject *f = Py_NewRef(PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1));
    Py_DECREF(files);
    long long end, from, file_size;
    int ok;
    if ((ok = attr_ll(self->file_queue, S_wrote_where, wrote)) <= 0 || (ok = attr_ll(f, S_end_offset, &end)) <= 0 ||
        (ok = attr_ll(f, S_file_from_offset, &from)) <= 0 || (ok = attr_ll(f, S_file_size, &file_size)) <= 0)
        goto refuse;
    if (*wrote >= end || *wrote < from)
        goto refuse;
    *pos = *wrote - from;
    if (size + END_FILE_MIN_BLANK_LENGTH > file_size - *pos)
        goto refuse;
    PyObject *m = PyObject_GetAttr(f, S_mm);
    if (m == NULL) {
        ok = -1;
        goto refuse;
    }
    ok = PyObject_GetBuffer(m, mm, PyBUF_WRITABLE);
    Py_DECREF(m);
    if (ok < 0)
        goto refuse;
    if (mm->len < file_size || *pos + size > mm->len) {
        PyBuffer_Release(mm);
        ok = 0;
        goto refuse;
    }
    *f_out = f;
    return 1;
refuse:
    Py_DECREF(f);
    return ok < 0 ? -1 : 0;
}

static inline long long
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A send request's fields, from a decoded command or (later) straight from its frame. Strings are new references
 * (properties may be NULL: absent); the body stays owned by the caller. */
typedef struct {
    PyObject *group, *topic, *default_topic, *properties;
    const char *body;
    Py_ssize_t body_len;
    int32_t code, queue_id, sys_flag, msg_flag, reconsume, opaque;
    long long born_ts;
    int rocketmq, batch;
} Send;

static void
send_clear(Send *s)
{
    Py_CLEAR(s->group);
    Py_CLEAR(s->topic);
    Py_CLEAR(s->default_topic);
    Py_CLEAR(s->properties);
}

/* A decoded command as a Send: 1, or 0 when it is not a plain send with every field plain, -1 with an exception. */
static int
from_command(Lane *self, PyObject *cmd, Send *s)
{
    long long code, cflag, copaque;
    int ok;
    if ((ok = attr_ll(cmd, S_code, &code)) <= 0)
        return ok;
    if (code != REQUEST_SEND_MESSAGE_V2 && code != REQUEST_SEND_MESSAGE && code != REQUEST_SEND_BATCH_MESSAGE)
        return 0;
    if ((ok = attr_ll(cmd, S_flag, &cflag)) <= 0 || (ok = attr_ll(cmd, S_opaque, &copaque)) <= 0)
        return ok;
    if (cflag & (RPC_TYPE_RESPONSE | RPC_ONEWAY) || copaque < INT32_MIN || copaque > INT32_MAX)
        return 0;
    int result = -1;
    PyObject *ext = NULL, *body = NULL, *stype = NULL;
    if ((ext = PyObject_GetAttr(cmd, S_ext_fields)) == NULL || (body = PyObject_GetAttr(cmd, S_body)) == NULL ||
        (stype = PyObject_GetAttr(cmd, S_serialize_type)) == NULL)
        goto out;
    result = 0;
    if (!PyDict_CheckExact(ext) || !PyBytes_CheckExact(body))
        goto out;
    PyObject **keys = code == REQUEST_SEND_MESSAGE ? KeysV1 : KeysV2;
    PyObject *v[N_FIELDS];
    for (int i = 0; i < N_FIELDS; i++) {
        v[i] = PyDict_GetItemWithError(ext, keys[i]);
        if (v[i] == NULL && PyErr_Occurred()) {
            result = -1;
            goto out;
        }
        if (v[i] != NULL && !PyUnicode_CheckExact(v[i]))
            goto out;
    }
    int32_t unused;
    long long born_ts;
    if (v[F_GROUP] == NULL || v[F_TOPIC] == NULL || v[F_DEFAULT_TOPIC] == NULL ||
        !plain_int32(v[F_DEFAULT_QUEUES], &unused) || !plain_int32(v[F_QUEUE_ID], &s->queue_id) ||
        !plain_int32(v[F_SYS_FLAG], &s->sys_flag) || !plain_decimal(v[F_BORN_TS], &born_ts) ||
        !plain_int32(v[F_FLAG], &s->msg_flag) ||
        (v[F_RECONSUME] != NULL && !plain_int32(v[F_RECONSUME], &s->reconsume)) ||
        (v[F_MAX_RECONSUME] != NULL && !plain_int32(v[F_MAX_RECONSUME], &unused)))
        goto out;
    /* A batch is SEND_BATCH_MESSAGE with batch=true, a single send anything else with batch false or absent. */
    s->batch = v[F_BATCH] != NULL && PyUnicode_CompareWithASCIIString(v[F_BATCH], "true") == 0;
    if ((v[F_BATCH] != NULL && !s->batch && PyUnicode_CompareWithASCIIString(v[F_BATCH], "false") != 0) ||
        s->batch != (code == REQUEST_SEND_BATCH_MESSAGE))
        goto out;
    s->born_ts = born_ts;
    s->code = (int32_t)code;
    s->opaque = (int32_t)copaque;
    s->rocketmq = stype == self->serialize_rocketmq;
    s->body = PyBytes_AS_STRING(body); /* the command holds the body */
    s->body_len = PyBytes_GET_SIZE(body);
    s->group = Py_NewRef(v[F_GROUP]);
    s->topic = Py_NewRef(v[F_TOPIC]);
    s->default_topic = Py_NewRef(v[F_DEFAULT_TOPIC]);
    s->properties = Py_XNewRef(v[F_PROPERTIES]);
    result = 1;
out:
    Py_XDECREF(ext);
    Py_XDECREF(body);
    Py_XDECREF(stype);
    return result;
}

/* A span's text as a str (JSON escapes resolved), or NULL: not UTF-8 (the Python decoder then says so) or an error. */
static PyObject *
span_str(const Span *sp)
{
    if (!sp->escaped)
        return PyUnicode_DecodeUTF8((const char *)sp->p, sp->n, NULL);
    /* One scratch buffer, grown as needed: the GIL is held, and nothing in here runs Python. */
    static unsigned char *scratch;
    static Py_ssize_t cap;
    if (sp->n > cap) {
        unsigned char *grown = PyMem_Realloc(scratch, sp->n);
        if (grown == NULL)
            return PyErr_NoMemory();
        scratch = grown;
        cap = sp->n;
    }
    Py_ssize_t n = sf_unescape(sp, scratch);
    return PyUnicode_DecodeUTF8((const char *)scratch, n, NULL);
}

/* A frame parsed in place as a Send: 1, 0 when it is not a plain send, -1 with an exception. */
static int
from_frame(Lane *self, const SendFrame *f, Send *s)
{
    if ((f->code != REQUEST_SEND_MESSAGE_V2 && f->code != REQUEST_SEND_MESSAGE && f->code != REQUEST_SEND_BATCH_MESSAGE) ||
        f->flag & (RPC_TYPE_RESPONSE | RPC_ONEWAY) || f->batch != (f->code == REQUEST_SEND_BATCH_MESSAGE) ||
        f->producer_group.p == NULL ||
        f->topic.p == NULL || f->default_topic.p == NULL)
        return 0;
    if ((s->group = span_str(&f->producer_group)) == NULL || (s->topic = span_str(&f->topic)) == NULL ||
        (s->default_topic = span_str(&f->default_topic)) == NULL ||
        (f->properties.p != NULL && (s->properties = span_str(&f->properties)) == NULL)) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    s->code = f->code;
    s->batch = f->batch;
    s->queue_id = f->queue_id;
    s->sys_flag = f->sys_flag;
    s->msg_flag = f->msg_flag;
    s->reconsume = f->has_reconsume_times ? f->reconsume_times : 0;
    s->born_ts = f->born_timestamp;
    s->opaque = f->opaque;
    s->rocketmq = f->serialize == 1;
    s->body = (const char *)f->body;
    s->body_len = f->body_len;
    return 1;
}

/* The request hooks' verdict on a send (RequestDispatcher.admit): 1 serve it, 2 a hook answered it, 0 leave it to
 * the dispatcher (it has no command yet, or a hook failed), -1 with an exception. */
static int
admitted(Gates *g, PyObject *channel, PyObject *cmd)
{
    if (cmd == NULL)
        return 0; /* read in place: the decoder makes its command, which take() then serves */
    PyObject *a[2] = {channel, cmd};
    PyObject *verdict = PyObject_Vectorcall(g->admit, a, 2, NULL);
    if (verdict == NULL)
        return -1;
    int v = verdict == Py_True ? 1 : verdict == Py_False ? 2 : 0;
    Py_DECREF(verdict);
    return v;
}

/* The queue's key (topic, queue id) in the commitlog's offset table, a new reference in *key, and its next queue
 * offset: 1, 0 when the table holds what the lane does not read (Python's then), -1 with an exception. */
static int
next_queue_offset(Gates *g, PyObject *topic, int32_t queue_id, PyObject **key, long long *offset)
{
    PyObject *qid = PyLong_FromLong(queue_id);
    if (qid == NULL)
        return -1;
    *key = PyTuple_Pack(2, topic, qid);
    Py_DECREF(qid);
    if (*key == NULL)
        return -1;
    *offset = 0;
    PyObject *cur = PyDict_GetItemWithError(g->queue_table, *key);
    if (cur == NULL)
        return PyErr_Occurred() ? -1 : 1;
    int overflow;
    if (!PyLong_CheckExact(cur) || (*offset = PyLong_AsLongLongAndOverflow(cur, &overflow), overflow))
        return 0;
    return 1;
}

/* What CommitLog.put_message(s) leave behind once records end at `end` in segment `f`: the commitlog's end and
 * tail, pages warmed ahead of the writer. 0, or -1 with an exception; *ts_obj the store time (a new reference, also
 * on failure when made). */
static int
advance_commitlog(Lane *self, PyObject *f, long long end, long long store_timestamp, PyObject **ts_obj)
{
    PyObject *next = PyLong_FromLongLong(end), *tail = NULL;
    long long warm_at;
    int ok = -1, result = -1;
    if (next == NULL || (*ts_obj = PyLong_FromLongLong(store_timestamp)) == NULL ||
        PyObject_SetAttr(self->file_queue, S_wrote_where, next) < 0 ||
        (tail = PyTuple_Pack(2, next, *ts_obj)) == NULL || PyObject_SetAttr(self->commit_log, S_tail, tail) < 0 ||
        (ok = attr_ll(self->commit_log, S__warm_at, &warm_at)) < 0)
        goto done;
    if (ok && end > warm_at) {
        PyObject *warmed = PyObject_CallMethodObjArgs(self->commit_log, S__warm, f, next, NULL);
        if (warmed == NULL)
            goto done;
        Py_DECREF(warmed);
    }
    result = 0;
done:
    Py_XDECREF(next);
    Py_XDECREF(tail);
    return result;
}

/* The longest msgId of one record: an IPv6 store host and the physical offset, in hex. */
#define MSG_ID_MAX (2 * (20 + 8))

/* The answer's msgId for records at `phys` into `out` (room for n * (MSG_ID_MAX + 1)): each the store host and the
 * physical offset in hex (create_offset_message_id), joined by commas; its length. */
static Py_ssize_t
write_msg_ids(PyObject *store_host, const long long *phys, Py_ssize_t n, char *out)
{
    Py_ssize_t host_len = PyBytes_GET_SIZE(store_host);
    unsigned char id_bytes[28];
    memcpy(id_bytes, PyBytes_AS_STRING(store_host), host_len);
    char *w = out;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i)
            *w++ = ',';
        put64(id_bytes + host_len, phys[i]);
        for (Py_ssize_t j = 0; j < host_len + 8; j++) {
            *w++ = Hex[id_bytes[j] >> 4];
            *w++ = Hex[id_bytes[j] & 15];
        }
    }
    return w - out;
}

/* One stored record to the commitlog's dispatcher (consume queue, index, arrival), as CommitLog.put_message(s)
 * call it. 0, or -1 with an exception. */
static int
dispatch_record(PyObject *dispatcher, PyObject *topic, PyObject *queue_id, long long phy, long long size,
                PyObject *tags, long long queue_offset, PyObject *store_timestamp, int32_t sys_flag, PyObject *props)
{
    PyObject *a[9] = {topic, queue_id, PyLong_FromLongLong(phy), PyLong_FromLongLong(size), tags,
                      PyLong_FromLongLong(queue_offset), store_timestamp, PyLong_FromLong(sys_flag), props};
    PyObject *dispatched = NULL;
    if (a[2] != NULL && a[3] != NULL && a[5] != NULL && a[7] != NULL)
        dispatched = PyObject_Vectorcall(dispatcher, a, 9, NULL);
    Py_XDECREF(a[2]);
    Py_XDECREF(a[3]);
    Py_XDECREF(a[5]);
    Py_XDECREF(a[7]);
    if (dispatched == NULL)
        return -1;
    Py_DECREF(dispatched);
    return 0;
}

/* The broker's counts for `n` messages of `bytes` stored to `topic` (MessageCounts.put). 0, or -1. */
static int
count_put(Lane *self, PyObject *topic, Py_ssize_t n, long long bytes)
{
    PyObject *a[3] = {topic, PyLong_FromSsize_t(n), PyLong_FromLongLong(bytes)};
    PyObject *counted = a[1] != NULL && a[2] != NULL ? PyObject_Vectorcall(self->count_put, a, 3, NULL) : NULL;
    Py_XDECREF(a[1]);
    Py_XDECREF(a[2]);
    if (counted == NULL)
        return -1;
    Py_DECREF(counted);
    return 0;
}

/* A stored send's answer `reply` (msgId `ids`, records ending at `end`, the first at `queue_offset` of queue
 * `queue_id`): now, appended to `replies` and counted in the latency histograms, or, when it waits for a flush or a
 * slave (SYNC_FLUSH, SYNC_MASTER), handed to send_lane.py's wait_stored, which answers once there. 0, or -1. */
static int
answer_stored(Lane *self, Gates *g, PyObject *channel, Send *s, PyObject *reply, const char *ids, Py_ssize_t ids_len,
              long long end, PyObject *queue_id, long long queue_offset, int wait, PyObject *replies, double start)
{
    if (!(g->waits && wait)) {
        if (PyList_Append(replies, reply) < 0 ||
            (g->latency != NULL && count_latency(g, s->code, monotonic_ms() - start) < 0))
            return -1;
        self->taken++;
        return 0;
    }
    PyObject *w[9] = {channel, PyLong_FromLong(s->code), PyLong_FromLong(s->opaque), s->rocketmq ? Py_True : Py_False,
                      PyLong_FromLongLong(end), reply, PyUnicode_FromStringAndSize(ids, ids_len), queue_id,
                      PyLong_FromLongLong(queue_offset)};
    PyObject *waited = NULL;
    if (w[1] != NULL && w[2] != NULL && w[4] != NULL && w[6] != NULL && w[8] != NULL)
        waited = PyObject_Vectorcall(self->wait_stored, w, 9, NULL);
    Py_XDECREF(w[1]);
    Py_XDECREF(w[2]);
    Py_XDECREF(w[4]);
    Py_XDECREF(w[6]);
    Py_XDECREF(w[8]);
    if (waited == NULL)
        return -1;
    Py_DECREF(waited);
    self->taken++;
    return 0;
}

/* One message of a batch as it is stored: its flag, body (in the request's body, or in `owner`), stored
 * properties (a str) and tags code. */
typedef struct {
    int32_t flag, tags;
    const char *body;
    Py_ssize_t body_len;
    PyObject *props;
} BatchEntry;

/* The tags code of ASCII properties p[0:n]: string_to_properties' TAGS (the last "TAGS\x01" property with a value),
 * hashed as Java's String.hashCode; 0 without one. */
static int32_t
ascii_tags_code(const char *p, Py_ssize_t n)
{
    static const char TAGS[] = "TAGS\x01";
    const Py_ssize_t tags_len = sizeof(TAGS) - 1;
    const char *tag = NULL;
    Py_ssize_t tag_n = 0;
    for (Py_ssize_t s = 0; s <= n;) {
        const char *sep = memchr(p + s, 2, n - s);
        Py_ssize_t e = sep ? sep - p : n;
        if (e - s > tags_len && memcmp(p + s, TAGS, tags_len) == 0) {
            tag = p + s + tags_len;
            tag_n = e - s - tags_len;
        }
        if (!sep)
            break;
        s = e + 1;
    }
    uint32_t h = 0;
    for (Py_ssize_t i = 0; i < tag_n; i++)
        h = 31 * h + (unsigned char)tag[i];
    return (int32_t)h;
}

/* Frees `n` entries and their properties (NULL ones skipped). */
static void
entries_free(BatchEntry *entries, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; entries != NULL && i < n; i++)
        Py_XDECREF(entries[i].props);
    PyMem_Free(entries);
}

static int
is_ascii(const char *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if ((unsigned char)p[i] & 0x80)
            return 0;
    return 1;
}

/* A batch body's messages parsed here as processors/send.py's batch_messages makes them (decode_batch, each one's
 * properties then `batch_str`'s, its TAGS' code) into *entries (n of them, PyMem): 1; 0 for a body that is not a
 * batch or is empty (the processor refuses it); 2 for text only Python decodes (not ASCII); -1 error. */
static int
parse_batch(const char *body, Py_ssize_t len, PyObject *batch_str, BatchEntry **entries, Py_ssize_t *n_out)
{
    const unsigned char *b = (const unsigned char *)body;
    if (!PyUnicode_IS_ASCII(batch_str))
        return 2;
    Py_ssize_t n = 0, bn = PyUnicode_GET_LENGTH(batch_str);
    const char *bs = (const char *)PyUnicode_1BYTE_DATA(batch_str);
    /* First the layout: each entry's total, magic, CRC, flag, body length, body, properties length, properties. */
    for (Py_ssize_t pos = 0; pos < len; n++) {
        if (len - pos < 20)
            return 0;
        int32_t total = get32(b + pos), blen = get32(b + pos + 16);
        Py_ssize_t p = pos + 20;
        if (blen < 0 || blen > len - p || len - p - blen < 2)
            return 0;
        p += blen;
        int16_t plen = get16(b + p);
        p += 2;
        if (plen < 0 || plen > len - p)
            return 0;
        if (!is_ascii(body + p, plen))
            return 2;
        p += plen;
        if (total != p - pos)
            return 0;
        pos = p;
    }
    if (n == 0)
        return 0;
    BatchEntry *out = PyMem_Calloc(n, sizeof(BatchEntry));
    if (out == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        BatchEntry *e = &out[i];
        e->flag = get32(b + pos + 12);
        e->body_len = get32(b + pos + 16);
        e->body = body + pos + 20;
        const char *inner = e->body + e->body_len + 2;
        Py_ssize_t inner_n = get16((const unsigned char *)inner - 2);
        e->tags = ascii_tags_code(inner, inner_n);
        Py_ssize_t stored_n = inner_n ? inner_n + 1 + bn : bn;
        if ((e->props = PyUnicode_New(stored_n, 127)) == NULL) {
            entries_free(out, i);
            return -1;
        }
        char *w = (char *)PyUnicode_1BYTE_DATA(e->props);
        if (inner_n) {
            memcpy(w, inner, inner_n);
            w[inner_n] = 2;
            w += inner_n + 1;
        }
        memcpy(w, bs, bn);
        pos = inner + inner_n - body;
    }
    *entries = out;
    *n_out = n;
    return 1;
}

/* The messages send_lane.py's batch() makes (Python's decoding, for what parse_batch leaves to it) as entries: 1, 0
 * for a batch the processor refuses, -1 error. `*owner` keeps the bodies alive. */
static int
python_batch(Lane *self, Send *s, PyObject *batch_str, BatchEntry **entries, Py_ssize_t *n_out, PyObject **owner)
{
    PyObject *body = PyBytes_FromStringAndSize(s->body, s->body_len);
    if (body == NULL)
        return -1;
    PyObject *args[2] = {batch_str, body};
    PyObject *list = PyObject_Vectorcall(self->batch, args, 2, NULL);
    Py_DECREF(body);
    if (list == NULL)
        return -1;
    *owner = list;
    if (!PyList_CheckExact(list) || PyList_GET_SIZE(list) == 0)
        return 0; /* the processor answers a bad or empty batch */
    Py_ssize_t n = PyList_GET_SIZE(list);
    BatchEntry *out = PyMem_Calloc(n, sizeof(BatchEntry));
    if (out == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PyList_GET_ITEM(list, i);
        int overflow = 0;
        long long flag = 0, tags = 0;
        if (PyTuple_CheckExact(e) && PyTuple_GET_SIZE(e) == 4 && PyLong_CheckExact(PyTuple_GET_ITEM(e, 0)) &&
            PyBytes_CheckExact(PyTuple_GET_ITEM(e, 1)) && PyUnicode_CheckExact(PyTuple_GET_ITEM(e, 2)) &&
            PyLong_CheckExact(PyTuple_GET_ITEM(e, 3))) {
            flag = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(e, 0), &overflow);
            if (!overflow)
                tags = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(e, 3), &overflow);
        }
        else
            overflow = 1;
        if (overflow || flag < INT32_MIN || flag > INT32_MAX || tags < INT32_MIN || tags > INT32_MAX) {
            entries_free(out, i);
            return 0;
        }
        out[i] = (BatchEntry){.flag = (int32_t)flag, .tags = (int32_t)tags,
                              .body = PyBytes_AS_STRING(PyTuple_GET_ITEM(e, 1)),
                              .body_len = PyBytes_GET_SIZE(PyTuple_GET_ITEM(e, 1)),
                              .props = Py_NewRef(PyTuple_GET_ITEM(e, 2))};
    }
    *entries = out;
    *n_out = n;
    return 1;
}

/* A batch's records dispatched by the store's Dispatcher.dispatch_run, in one call. 0, or -1 with an exception set. */
static int
dispatch_batch(Lane *self, PyObject *topic, PyObject *queue_id, BatchEntry *entries, long long *phys, long long *sizes,
               Py_ssize_t n, long long first_offset, PyObject *ts_obj, int32_t sys_flag)
{
    int ok = -1;
    PyObject *dispatcher = PyObject_GetAttr(self->commit_log, S_dispatcher), *run = NULL, *units = NULL, *props = NULL;
    if (dispatcher == NULL)
        return -1;
    if ((run = PyObject_GetAttr(dispatcher, S_dispatch_run)) == NULL ||
        (units = PyBytes_FromStringAndSize(NULL, n * 3 * (Py_ssize_t)sizeof(int64_t))) == NULL ||
        (props = PyList_New(n)) == NULL)
        goto out;
    char *u = PyBytes_AS_STRING(units);
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t rec[3] = {phys[i], sizes[i], entries[i].tags};
        memcpy(u + i * sizeof(rec), rec, sizeof(rec));
        PyList_SET_ITEM(props, i, Py_NewRef(entries[i].props));
    }
    PyObject *first = PyLong_FromLongLong(first_offset), *flag = PyLong_FromLong(sys_flag);
    if (first != NULL && flag != NULL) {
        PyObject *a[7] = {topic, queue_id, first, ts_obj, flag, units, props};
        PyObject *r = PyObject_Vectorcall(run, a, 7, NULL);
        ok = r == NULL ? -1 : 0;
        Py_XDECREF(r);
    }
    Py_XDECREF(first);
    Py_XDECREF(flag);
out:
    Py_XDECREF(units);
    Py_XDECREF(props);
    Py_XDECREF(run);
    Py_DECREF(dispatcher);
    return ok;
}

/* A SEND_BATCH_MESSAGE whose checks serve() has done: its messages as SendMessageProcessor._send_batch makes them
 * (parse_batch, or send_lane.py's batch() for text that is not ASCII), written contiguously as
 * CommitLog.put_messages writes them (one store time, consecutive queue offsets), dispatched, counted and answered
 * with the records' ids joined by commas. 1 taken, 0 left to Python (what it would refuse: a bad or empty body, a
 * message or batch too large, properties too long, a segment to roll), -1 error. */
static int
store_batch(Lane *self, Gates *g, PyObject *channel, Send *s, PyObject *topic_b, PyObject *born, int32_t sys_flag,
            int wait, PyObject *replies, double start)
{
    int ok, result = -1;
    PyObject *owner = NULL, *f = NULL, *key = NULL, *ts_obj = NULL, *reply = NULL, *batch_str = NULL;
    BatchEntry *entries = NULL;
    Py_ssize_t n = 0;
    Record *recs = NULL;
    long long *sizes = NULL;
    char *ids = NULL;
    Py_buffer mm = {0};
    PyObject *props_arg = s->properties != NULL ? s->properties : Py_None, *last = self->last_batch_props;
    if (last != NULL && (last == props_arg || (PyUnicode_CheckExact(props_arg) && PyUnicode_CheckExact(last) &&
                                               PyUnicode_Compare(props_arg, last) == 0)))
        batch_str = Py_NewRef(self->last_batch_str);
    else {
        if ((batch_str = PyObject_CallOneArg(self->batch_properties, props_arg)) == NULL)
            return -1;
        if (!PyUnicode_CheckExact(batch_str)) {
            PyErr_SetString(PyExc_TypeError, "batch_properties must return a str");
            goto done;
        }
        Py_XSETREF(self->last_batch_props, Py_NewRef(props_arg));
        Py_XSETREF(self->last_batch_str, Py_NewRef(batch_str));
    }
    if ((ok = parse_batch(s->body, s->body_len, batch_str, &entries, &n)) < 0 ||
        (ok == 2 && (ok = python_batch(self, s, batch_str, &entries, &n, &owner)) < 0))
        goto done;
    result = 0;
    if (ok == 0)
        goto done;
    Py_ssize_t born_len = PyBytes_GET_SIZE(born), store_len = PyBytes_GET_SIZE(g->store_host);
    if ((recs = PyMem_Calloc(n, sizeof(Record))) == NULL || (sizes = PyMem_Calloc(2 * n, sizeof(long long))) == NULL) {
        PyErr_NoMemory();
        result = -1;
        goto done;
    }
    long long *phys = sizes + n;
    sys_flag &= ~HOST_V6_FLAGS;
    if (born_len == 20)
        sys_flag |= BORNHOST_V6_FLAG;
    if (store_len == 20)
        sys_flag |= STOREHOSTADDRESS_V6_FLAG;
    long long total = 0, body_total = 0;
    /* CommitLog._check_batch: each message as _check checks it, then the bodies and the records together. */
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t props_len;
        const char *props = PyUnicode_AsUTF8AndSize(entries[i].props, &props_len);
        if (props == NULL) {
            result = -1;
            goto done;
        }
        if (props_len > MAX_PROPERTIES_LENGTH || entries[i].body_len > g->max_message_size)
            goto done;
        recs[i] = (Record){
            .magic = MESSAGE_MAGIC_CODE, .queue_id = s->queue_id, .flag = entries[i].flag, .sys_flag = sys_flag,
            .reconsume_times = s->reconsume, .born_timestamp = s->born_ts, .prepared_offset = 0,
            .born_host = PyBytes_AS_STRING(born), .born_len = born_len, .store_host = PyBytes_AS_STRING(g->store_host),
            .store_len = store_len, .body = entries[i].body, .body_len = entries[i].body_len,
            .topic = PyBytes_AS_STRING(topic_b), .topic_len = PyBytes_GET_SIZE(topic_b), .props = props,
            .props_len = props_len,
        };
        sizes[i] = record_length(&recs[i]);
        total += sizes[i];
        body_total += entries[i].body_len;
    }
    if (body_total > g->max_message_size || total + END_FILE_MIN_BLANK_LENGTH > self->mapped_file_size)
        goto done;
    long long pos, wrote;
    if ((ok = current_segment(self, total, &f, &mm, &pos, &wrote)) <= 0) {
        result = ok;
        goto done;
    }
    long long first_offset;
    if ((result = next_queue_offset(g, s->topic, s->queue_id, &key, &first_offset)) <= 0)
        goto done;
    result = -1;
    /* The bodies' CRCs; nothing after this point refuses the batch. */
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t crc = crc32_update(0, (const unsigned char *)entries[i].body, (size_t)entries[i].body_len);
        recs[i].body_crc = (int32_t)(crc & 0x7FFFFFFF);
    }
    long long phy = wrote, store_timestamp = now_ms();
    for (Py_ssize_t i = 0; i < n; i++) {
        recs[i].queue_offset = first_offset + i;
        recs[i].phy = phys[i] = phy;
        recs[i].store_timestamp = store_timestamp;
        put_record((unsigned char *)mm.buf + pos, sizes[i], &recs[i]);
        pos += sizes[i];
        phy += sizes[i];
    }
    PyBuffer_Release(&mm);
    mm.obj = NULL;
    long long end = phy;
    if (advance_commitlog(self, f, end, store_timestamp, &ts_obj) < 0)
        goto done;
    PyObject *qoff = PyLong_FromLongLong(first_offset + n);
    if (qoff == NULL)
        goto done;
    ok = PyDict_SetItem(g->queue_table, key, qoff);
    Py_DECREF(qoff);
    if (ok < 0)
        goto done;
    if (dispatch_batch(self, s->topic, PyTuple_GET_ITEM(key, 1), entries, phys, sizes, n, first_offset, ts_obj,
                       sys_flag) < 0 ||
        count_put(self, s->topic, n, total) < 0)
        goto done;
    if ((ids = PyMem_Malloc(n * (MSG_ID_MAX + 1))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t ids_len = write_msg_ids(g->store_host, phys, n, ids);
    if ((reply = reply_frame(self, s->rocketmq, s->opaque, ids, ids_len, s->queue_id, first_offset)) == NULL ||
        answer_stored(self, g, channel, s, reply, ids, ids_len, end, PyTuple_GET_ITEM(key, 1), first_offset, wait,
                      replies, start) < 0)
        goto done;
    self->batches++;
    result = 1;
done:
    if (mm.obj != NULL)
        PyBuffer_Release(&mm);
    entries_free(entries, n);
    PyMem_Free(recs);
    PyMem_Free(sizes);
    PyMem_Free(ids);
    Py_XDECREF(owner);
    Py_XDECREF(batch_str);
    Py_XDECREF(f);
    Py_XDECREF(key);
    Py_XDECREF(ts_obj);
    Py_XDECREF(reply);
    return result;
}

/* One send (`cmd` its decoded command, or NULL when read in place): 1 taken (its reply appended to `replies` or
 * handed to wait_stored, or a request hook answered it), 0 left to Python, -1 error. */
static int
serve(Lane *self, Gates *g, PyObject *channel, PyObject *cmd, Send *s, PyObject *replies)
{
    int ok, result = 0;
    int32_t queue_id = s->queue_id, sys_flag = s->sys_flag;
    PyObject *done = NULL, *key = NULL, *f = NULL, *born = NULL, *attrs = NULL;
    PyObject *reply = NULL, *tc = NULL;
    Py_buffer mm = {0};
    if ((ok = gates_open(self, g)) <= 0)
        return ok;
    double start = g->latency != NULL ? monotonic_ms() : 0.0; /* as the dispatcher's: before the hooks */
    if (g->admit != NULL && (ok = admitted(g, channel, cmd)) != 1)
        return ok == 2 ? 1 : ok;
    /* Names Python has checked before (it remembers the legal ones). */
    if ((ok = PySet_Contains(self->known_groups, s->group)) <= 0 ||
        (ok = PySet_Contains(self->known_topics, s->topic)) <= 0 ||
        (ok = PySet_Contains(self->known_topics, s->default_topic)) <= 0)
        goto checked;
    /* msg_check: a send to this topic is allowed, the topic exists and takes writes, the queue is one of its. */
    PyObject *topic = s->topic;
    if ((ok = PySet_Contains(self->not_allowed, topic)) != 0)
        goto checked;
    if ((ok = (int)PyUnicode_Tailmatch(topic, self->retry_prefix, 0, PY_SSIZE_T_MAX, -1)) != 0)
        goto checked;
    if ((tc = PyDict_GetItemWithError(g->topic_table, topic)) == NULL) {
        if (PyErr_Occurred())
            goto error;
        goto out;
    }
    Py_INCREF(tc);
    long long perm, wq, rq;
    if ((ok = attr_ll(tc, S_perm, &perm)) <= 0 || (ok = attr_ll(tc, S_write_queue_nums, &wq)) <= 0 ||
        (ok = attr_ll(tc, S_read_queue_nums, &rq)) <= 0)
        goto checked;
    if (!(perm & PERM_WRITE) || queue_id < 0 || queue_id >= (wq > rq ? wq : rq))
        goto out;
    PyObject *filter_type = PyObject_GetAttr(tc, S_topic_filter_type);
    if (filter_type == NULL)
        goto error;
    ok = PyObject_RichCompareBool(filter_type, MultiTag, Py_EQ);
    Py_DECREF(filter_type);
    if (ok < 0)
        goto error;
    if (ok)
        sys_flag |= MULTI_TAGS_FLAG;
    /* SendMessageProcessor._send's plain case; a transaction flag makes a record that is not dispatched. */
    if (sys_flag & TRANSACTION_MASK)
        goto out;
    PyObject *raw = s->properties != NULL ? s->properties : EmptyStr;
    for (int i = 0; i < 3; i++)
        if ((ok = PySequence_Contains(raw, Markers[i])) != 0)
            goto checked;
    PyObject *sp_args[2] = {raw, self->cluster};
    if ((done = PyObject_Vectorcall(self->send_properties, sp_args, 2, NULL)) == NULL)
        goto error;
    if (!PyTuple_CheckExact(done) || PyTuple_GET_SIZE(done) != 3)
        goto out; /* NotImplemented: text C leaves to Python */
    PyObject *props = PyTuple_GET_ITEM(done, 0);
    long long tags;
    int wait;
    if (!PyUnicode_CheckExact(props) || !PyLong_CheckExact(PyTuple_GET_ITEM(done, 1)))
        goto out;
    if ((tags = PyLong_AsLongLong(PyTuple_GET_ITEM(done, 1))) == -1 && PyErr_Occurred())
        goto error;
    if ((wait = PyObject_IsTrue(PyTuple_GET_ITEM(done, 2))) < 0)
        goto error;

    /* The born host, as BrokerController.born_host caches it on the connection. */
    if ((attrs = PyObject_GetAttr(channel, S_attributes)) == NULL)
        goto error;
    if (!PyDict_CheckExact(attrs) || (born = PyDict_GetItemWithError(attrs, S_born_host)) == NULL) {
        if (PyErr_Occurred())
            goto error;
        if ((born = PyObject_CallMethodOneArg(self->broker, S_born_host, channel)) == NULL)
            goto error;
    } else
        Py_INCREF(born);
    if (!PyBytes_CheckExact(born))
        goto out;

    /* CommitLog._check: the topic's cached bytes (Python checks and caches a topic the first time), the lengths. */
    PyObject *topic_b = PyDict_GetItemWithError(g->topic_bytes, topic);
    if (topic_b == NULL) {
        if (PyErr_Occurred())
            goto error;
        goto out;
    }
    if (s->batch) {
        if (!PyBytes_CheckExact(topic_b) || PyBytes_GET_SIZE(topic_b) > MAX_TOPIC_LENGTH ||
            (PyBytes_GET_SIZE(born) != 8 && PyBytes_GET_SIZE(born) != 20) ||
            (PyBytes_GET_SIZE(g->store_host) != 8 && PyBytes_GET_SIZE(g->store_host) != 20))
            goto out;
        result = store_batch(self, g, channel, s, topic_b, born, sys_flag, wait, replies, start);
        goto out;
    }
    Py_ssize_t props_len, born_len = PyBytes_GET_SIZE(born), store_len = PyBytes_GET_SIZE(g->store_host);
    const char *props_utf8 = PyUnicode_AsUTF8AndSize(props, &props_len);
    if (props_utf8 == NULL)
        goto error;
    if (!PyBytes_CheckExact(topic_b) || PyBytes_GET_SIZE(topic_b) > MAX_TOPIC_LENGTH ||
        props_len > MAX_PROPERTIES_LENGTH || s->body_len > g->max_message_size ||
        s->body_len > INT32_MAX || (born_len != 8 && born_len != 20) || (store_len != 8 && store_len != 20))
        goto out;
    sys_flag &= ~HOST_V6_FLAGS;
    if (born_len == 20)
        sys_flag |= BORNHOST_V6_FLAG;
    if (store_len == 20)
        sys_flag |= STOREHOSTADDRESS_V6_FLAG;
    Record r = {
        .magic = MESSAGE_MAGIC_CODE, .queue_id = queue_id, .flag = s->msg_flag, .sys_flag = sys_flag,
        .reconsume_times = s->reconsume, .born_timestamp = s->born_ts, .prepared_offset = 0, .born_host = PyBytes_AS_STRING(born),
        .born_len = born_len, .store_host = PyBytes_AS_STRING(g->store_host), .store_len = store_len,
        .body = s->body, .body_len = s->body_len, .topic = PyBytes_AS_STRING(topic_b),
        .topic_len = PyBytes_GET_SIZE(topic_b), .props = props_utf8, .props_len = props_len,
    };
    long long size = record_length(&r);
    if (size + END_FILE_MIN_BLANK_LENGTH > self->mapped_file_size)
        goto out;
    long long pos, wrote;
    if ((ok = current_segment(self, size, &f, &mm, &pos, &wrote)) <= 0)
        goto checked;
    /* The queue offset and the body's CRC; nothing after this point refuses the message. */
    long long queue_offset;
    if ((ok = next_queue_offset(g, topic, queue_id, &key, &queue_offset)) <= 0)
        goto checked;
    long long phy = wrote, end = wrote + size, store_timestamp = now_ms();
    r.body_crc = (int32_t)(crc32_update(0, (const unsigned char *)s->body, (size_t)s->body_len) & 0x7FFFFFFF);
    r.queue_offset = queue_offset;
    r.phy = phy;
    r.store_timestamp = store_timestamp;
    put_record((unsigned char *)mm.buf + pos, size, &r);
    PyBuffer_Release(&mm);
    mm.obj = NULL;

    /* What CommitLog.put_message leaves behind: the commitlog's end and tail, warm pages ahead, the queue's next
     * offset; then the dispatch to the consume queue and index, the broker's counts and the answer. */
    PyObject *ts_obj = NULL, *qoff_obj = NULL, *tags_obj = NULL, *dispatcher = NULL;
    char msg_id[MSG_ID_MAX];
    Py_ssize_t id_len = write_msg_ids(g->store_host, &phy, 1, msg_id);
    if (advance_commitlog(self, f, end, store_timestamp, &ts_obj) < 0 ||
        (qoff_obj = PyLong_FromLongLong(queue_offset + 1)) == NULL || PyDict_SetItem(g->queue_table, key, qoff_obj) < 0 ||
        (dispatcher = PyObject_GetAttr(self->commit_log, S_dispatcher)) == NULL ||
        (tags_obj = PyLong_FromLongLong(tags)) == NULL ||
        dispatch_record(dispatcher, topic, PyTuple_GET_ITEM(key, 1), phy, size, tags_obj, queue_offset, ts_obj,
                        sys_flag, props) < 0 ||
        count_put(self, topic, 1, size) < 0 ||
        (reply = reply_frame(self, s->rocketmq, s->opaque, msg_id, id_len, queue_id, queue_offset)) == NULL ||
        answer_stored(self, g, channel, s, reply, msg_id, id_len, end, PyTuple_GET_ITEM(key, 1), queue_offset, wait,
                      replies, start) < 0)
        result = -1;
    else
        result = 1;
    Py_XDECREF(ts_obj);
    Py_XDECREF(qoff_obj);
    Py_XDECREF(tags_obj);
    Py_XDECREF(dispatcher);
    goto out;
error:
    result = -1;
    goto out;
checked:
    result = ok < 0 ? -1 : 0;
out:
    if (mm.obj != NULL)
        PyBuffer_Release(&mm);
    Py_XDECREF(done);
    Py_XDECREF(key);
    Py_XDECREF(f);
    Py_XDECREF(born);
    Py_XDECREF(attrs);
    Py_XDECREF(reply);
    Py_XDECREF(tc);
    return result;
}

/* take(channel, commands, start, replies) -> int: serve commands[start:] in order while each is a plain send the
 * lane takes (its reply appended to `replies`, or waiting in send_lane.py); the index of the first one it does not
 * take (len(commands) when it took them all). */
static PyObject *
lane_take(Lane *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyList_CheckExact(args[1]) || !PyLong_CheckExact(args[2]) || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "take(channel, commands: list, start: int, replies: list)");
        return NULL;
    }
    PyObject *channel = args[0], *commands = args[1], *replies = args[3];
    Py_ssize_t i = PyLong_AsSsize_t(args[2]);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0)
        i = 0;
    Py_ssize_t n = PyList_GET_SIZE(commands);
    if (i >= n)
        return PyLong_FromSsize_t(n);
    Gates g = {0};
    int ok = 1;
    while (ok > 0 && i < PyList_GET_SIZE(commands)) {
        PyObject *cmd = Py_NewRef(PyList_GET_ITEM(commands, i));
        Send send = {0};
        ok = from_command(self, cmd, &send);
        if (ok > 0)
            ok = serve(self, &g, channel, cmd, &send, replies);
        send_clear(&send);
        Py_DECREF(cmd);
        if (ok > 0)
            i++;
    }
    release_gates(&g);
    if (ok < 0)
        return NULL;
    return PyLong_FromSsize_t(i);
}

/* take_frames(channel, buf: bytearray, max_frame_length, replies) -> int: serve the whole frames at the start of
 * `buf` while each is a plain send the lane takes, reading them in place (no command is made); delete them from
 * `buf`; the bytes served. What is left (a frame it does not take and all after it, a partial frame) is the
 * decoder's. */
static PyObject *
lane_take_frames(Lane *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyByteArray_CheckExact(args[1]) || !PyLong_CheckExact(args[2]) || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "take_frames(channel, buf: bytearray, max_frame_length: int, replies: list)");
        return NULL;
    }
    PyObject *channel = args[0], *buf = args[1], *replies = args[3];
    long long max_frame = PyLong_AsLongLong(args[2]);
    if (max_frame == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t len = PyByteArray_GET_SIZE(buf), pos = 0;
    if (len < 4 || (long long)(uint32_t)get32((unsigned char *)PyByteArray_AS_STRING(buf)) > len - 4)
        return PyLong_FromLong(0); /* no whole frame yet */
    Gates g = {0};
    int ok = 1;
    while (ok > 0 && len - pos >= 4) {
        const unsigned char *frame = (const unsigned char *)PyByteArray_AS_STRING(buf) + pos;
        long long total = (uint32_t)get32(frame);
        if (total < 4 || total + 4 > max_frame || total > len - pos - 4)
            break; /* what the decoder refuses, or not whole yet */
        SendFrame f;
        Send send = {0};
        if (!parse_send_frame(frame, 4 + (Py_ssize_t)total, &f))
            break;
        ok = from_frame(self, &f, &send);
        if (ok > 0)
            ok = serve(self, &g, channel, NULL, &send, replies);
        send_clear(&send);
        if (ok > 0) {
            self->in_place++;
            pos += 4 + (Py_ssize_t)total;
            if (PyByteArray_GET_SIZE(buf) != len) { /* Python code the send ran changed the buffer: stop */
                PyErr_SetString(PyExc_RuntimeError, "the decoder's buffer changed while the send lane read it");
                ok = -1;
            }
        }
    }
    release_gates(&g);
    if (ok < 0)
        return NULL;
    if (pos > 0 && PySequence_DelSlice(buf, 0, pos) < 0)
        return NULL;
    return PyLong_FromSsize_t(pos);
}

static PyObject *
lane_get_taken(Lane *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(self->taken);
}

static PyMethodDef lane_methods[] = {
    {"take", (PyCFunction)(void (*)(void))lane_take, METH_FASTCALL,
     "take(channel, commands, start, replies) -> index of the first command not taken."},
    {"take_frames", (PyCFunction)(void (*)(void))lane_take_frames, METH_FASTCALL,
     "take_frames(channel, buf, max_frame_length, replies) -> bytes of the leading frames served (and deleted)."},
    {NULL},
};

static PyObject *
lane_get_in_place(Lane *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(self->in_place);
}

static PyObject *
lane_get_batches(Lane *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(self->batches);
}

static PyGetSetDef lane_getset[] = {
    {"taken", (getter)lane_get_taken, NULL, "Sends the lane has taken.", NULL},
    {"in_place", (getter)lane_get_in_place, NULL, "Sends the lane has taken reading their frames in place.", NULL},
    {"batches", (getter)lane_get_batches, NULL, "Batch sends the lane has taken.", NULL},
    {NULL},
};

static PyTypeObject LaneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gateway.broker._send_lane.Lane",
    .tp_basicsize = sizeof(Lane),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The send lane (see send_lane.py); built with keyword arguments only.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)lane_init,
    .tp_dealloc = (destructor)lane_dealloc,
    .tp_methods = lane_methods,
    .tp_getset = lane_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_send_lane", "The broker's C send lane.", -1, NULL};

PyMODINIT_FUNC
PyInit__send_lane(void)
{
    crc32_init(); /* its tables (and the CPU check) before the first send, not on it */
#define INTERN(n)                                                                                                    \
    if ((S_##n = PyUnicode_InternFromString(#n)) == NULL)                                                           \
        return NULL;
    NAMES(INTERN)
    if ((MultiTag = PyUnicode_InternFromString("MULTI_TAG")) == NULL ||
        (EmptyStr = PyUnicode_InternFromString("")) == NULL ||
        (Markers[0] = PyUnicode_InternFromString("DELAY\x01")) == NULL ||
        (Markers[1] = PyUnicode_InternFromString("TIMER_")) == NULL ||
        (Markers[2] = PyUnicode_InternFromString("TRAN_MSG\x01")) == NULL)
        return NULL;
    for (int i = 0; i < N_FIELDS; i++)
        if ((KeysV2[i] = PyUnicode_InternFromString(V2Keys[i])) == NULL ||
            (KeysV1[i] = PyUnicode_InternFromString(V1Keys[i])) == NULL)
            return NULL;
    if (PyType_Ready(&LaneType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Lane", (PyObject *)&LaneType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
