/* SendThread: the socket writes of server connections on a thread of their own, which never takes the GIL.
 *
 * On loopback and on a busy server, send() is the costliest system call of a request: the kernel runs the TCP
 * transmit path and, on loopback, the peer's receive path and its wake-up too. Done on the reactor thread, that is
 * about a sixth of a send's CPU time; done here, it runs on another core when the process has one. A send the peer
 * waits on may still go from the reactor (send(..., now=True)) when nothing of its channel is queued: see sender.py.
 *
 * A channel is a dup() of a connection's socket, so its number cannot be reused while frames for it are queued.
 * Frames are copied into the queue and sent in order, non-blocking. When a socket takes less than it is given (the
 * peer reads slowly), the channel stalls: the rest, and every frame queued for it after, waits in its stash, its id
 * is listed for stalled() and a byte is written to notify_fd; the reactor then take()s the bytes back and writes
 * them through its own transport, which buffers, pauses the peer's reads and resumes as usual. A channel whose
 * send failed drops its frames: the reactor finds the connection closed on its read side.
 *
 * Methods run under the GIL on one thread (the reactor's); the thread touches only the queue, under the mutex, and
 * the channels of the batch it is sending, which take() waits for. */
#include "../_native.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* What the queue may hold before send() waits for the thread: a cap on memory for a thread that cannot keep up. */
#define MAX_QUEUED_BYTES (64u << 20)
/* Parts a reply sent on the caller's thread may have (one sendmsg); one with more goes through the queue. */
#define MAX_NOW_PARTS 64

enum { OPEN, STALLED, FAILED };

typedef struct Channel {
    int fd;
    int state;
    size_t inflight; /* its items queued or in the thread's batch (atomic: both sides count) */
    unsigned char *stash;
    size_t stash_len, stash_cap;
} Channel;

typedef struct Item {
    struct Item *next;
    Channel *ch;
    int close; /* close the channel's descriptor and free it, after the frames queued before */
    size_t len;
    unsigned char data[];
} Item;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    pthread_cond_t work;  /* the thread waits for items */
    pthread_cond_t idle;  /* take() and a full queue wait for the thread's batch to end */
    pthread_t thread;
    int started, joined, stopping, sleeping, busy, taking, notify_fd;
    Item *head, *tail;
    size_t queued;
    Channel **channels; /* by id: the dup's descriptor number; only methods (under the GIL) use it */
    Py_ssize_t nchannels;
    int *stalled;
    Py_ssize_t nstalled, stalled_cap;
} SendThread;

static int
stash_append(Channel *ch, const unsigned char *p, size_t n)
{
    if (ch->stash_len + n > ch->stash_cap) {
        size_t cap = ch->stash_cap ? ch->stash_cap : 4096;
        while (cap < ch->stash_len + n)
            cap *= 2;
        unsigned char *s = realloc(ch->stash, cap);
        if (s == NULL)
            return -1;
        ch->stash = s;
        ch->stash_cap = cap;
    }
    memcpy(ch->stash + ch->stash_len, p, n);
    ch->stash_len += n;
    return 0;
}

static void
channel_free(Channel *ch)
{
    close(ch->fd);
    free(ch->stash);
    free(ch);
}

/* Send one item's frames; 1 when the channel stalled on it. */
static int
send_item(Item *it)
{
    Channel *ch = it->ch;
    if (ch->state == FAILED)
        return 0;
    if (ch->state == STALLED) {
        if (stash_append(ch, it->data, it->len) < 0)
            ch->state = FAILED;
        return 0;
    }
    size_t off = 0;
    while (off < it->len) {
        ssize_t n = send(ch->fd, it->data + off, it->len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n >= 0) {
            off += (size_t)n;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            ch->state = stash_append(ch, it->data + off, it->len - off) < 0 ? FAILED : STALLED;
            return ch->state == STALLED;
        } else if (errno != EINTR) {
            ch->state = FAILED;
            return 0;
        }
    }
    return 0;
}

static void *
send_thread_run(void *arg)
{
    SendThread *t = arg;
    int *stalled = NULL;
    Py_ssize_t cap = 0;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while ((t->head == NULL || t->taking) && !t->stopping) {
            t->sleeping = 1;
            pthread_cond_wait(&t->work, &t->mu);
            t->sleeping = 0;
        }
        if (t->head == NULL)
            break; /* stopping, and everything queued is sent */
        Item *batch = t->head;
        t->head = t->tail = NULL;
        t->busy = 1;
        pthread_mutex_unlock(&t->mu);
        Py_ssize_t n = 0;
        size_t bytes = 0;
        while (batch != NULL) {
            Item *it = batch;
            batch = it->next;
            bytes += it->len;
            if (it->close) {
                channel_free(it->ch);
            } else if (send_item(it)) {
                if (n == cap) {
                    Py_ssize_t c = cap ? cap * 2 : 16;
                    int *s = realloc(stalled, c * sizeof(int));
                    if (s != NULL) {
                        stalled = s;
                        cap = c;
                    }
                }
                if (n < cap)
                    stalled[n++] = it->ch->fd;
                /* else: out of memory; the stash waits for the next take() of this channel */
            }
            if (!it->close) /* after its send: the reactor may send on this channel itself once none is left */
                __atomic_sub_fetch(&it->ch->inflight, 1, __ATOMIC_RELEASE);
            free(it);
        }
        pthread_mutex_lock(&t->mu);
        t->busy = 0;
        t->queued -= bytes;
        if (n > 0) {
            if (t->nstalled + n > t->stalled_cap) {
                Py_ssize_t c = t->stalled_cap ? t->stalled_cap : 16;
                while (c < t->nstalled + n)
                    c *= 2;
                int *s = realloc(t->stalled, c * sizeof(int));
                if (s != NULL) {
                    t->stalled = s;
                    t->stalled_cap = c;
                }
            }
            if (t->nstalled + n <= t->stalled_cap) {
                memcpy(t->stalled + t->nstalled, stalled, n * sizeof(int));
                t->nstalled += n;
            }
            notify_reactor(t->notify_fd);
        }
        pthread_cond_broadcast(&t->idle);
    }
    pthread_mutex_unlock(&t->mu);
    free(stalled);
    return NULL;
}

static int
send_thread_init(SendThread *t, PyObject *args, PyObject *kwds)
{
    int fd;
    if (t->started) {
        PyErr_SetString(PyExc_RuntimeError, "SendThread is already started");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "i:SendThread", &fd))
        return -1;
    t->notify_fd = fd;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->work, NULL);
    pthread_cond_init(&t->idle, NULL);
    if (start_thread(&t->thread, send_thread_run, t, "send-thread") < 0) {
        pthread_cond_destroy(&t->idle);
        pthread_cond_destroy(&t->work);
        pthread_mutex_destroy(&t->mu);
        return -1;
    }
    t->started = 1;
    return 0;
}

static Channel *
lookup(SendThread *t, PyObject *arg)
{
    long id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    if (id < 0 || id >= t->nchannels || t->channels[id] == NULL) {
        PyErr_Format(PyExc_KeyError, "no channel %ld", id);
        return NULL;
    }
    return t->channels[id];
}

/* Queue an item; `wake` the thread if it sleeps (else kick() does, once for a reactor turn's items). */
static int
enqueue(SendThread *t, Item *it, int wake)
{
    pthread_mutex_lock(&t->mu);
    if (t->stopping) {
        pthread_mutex_unlock(&t->mu);
        PyErr_SetString(PyExc_RuntimeError, "SendThread is stopped");
        return -1;
    }
    while (t->queued > MAX_QUEUED_BYTES && t->head != NULL) {
        if (t->sleeping) /* it has not been kicked yet */
            pthread_cond_signal(&t->work);
        pthread_cond_wait(&t->idle, &t->mu);
    }
    if (t->tail != NULL)
        t->tail->next = it;
    else
        t->head = it;
    t->tail = it;
    t->queued += it->len;
    if (!it->close)
        __atomic_add_fetch(&it->ch->inflight, 1, __ATOMIC_RELEASE);
    if (wake && t->sleeping)
        pthread_cond_signal(&t->work);
    pthread_mutex_unlock(&t->mu);
    return 0;
}

static PyObject *
send_thread_open(SendThread *t, PyObject *arg)
{
    int fd = PyObject_AsFileDescriptor(arg);
    if (fd < 0)
        return NULL;
    if (!t->started || t->stopping) {
        PyErr_SetString(PyExc_RuntimeError, "SendThread is not running");
        return NULL;
    }
    Channel *ch = calloc(1, sizeof(Channel));
    if (ch == NULL)
        return PyErr_NoMemory();
    ch->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (ch->fd < 0) {
        free(ch);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (ch->fd >= t->nchannels) {
        Py_ssize_t n = t->nchannels ? t->nchannels : 64;
        while (n <= ch->fd)
            n *= 2;
        Channel **c = realloc(t->channels, n * sizeof(Channel *));
        if (c == NULL) {
            channel_free(ch);
            return PyErr_NoMemory();
        }
        memset(c + t->nchannels, 0, (n - t->nchannels) * sizeof(Channel *));
        t->channels = c;
        t->nchannels = n;
    }
    t->channels[ch->fd] = ch;
    return PyLong_FromLong(ch->fd);
}

/* Send on the caller's thread: nothing of this channel is queued or being sent. None when the socket took everything
 * (or the channel failed: the reactor sees the connection close on its read side), else the bytes it did not take,
 * for the caller's transport to buffer. */
static PyObject *
send_now(Channel *ch, PyObject *parts, Py_ssize_t n)
{
    Py_buffer bufs[MAX_NOW_PARTS];
    struct iovec iov[MAX_NOW_PARTS];
    size_t len = 0;
    Py_ssize_t got;
    for (got = 0; got < n; got++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(parts, got), &bufs[got], PyBUF_SIMPLE) < 0)
            break;
        iov[got].iov_base = bufs[got].buf;
        iov[got].iov_len = (size_t)bufs[got].len;
        len += (size_t)bufs[got].len;
    }
    PyObject *result = NULL;
    if (got == n) {
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        size_t sent = 0;
        int err = 0;
        while (sent < len) {
            ssize_t k = sendmsg(ch->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (k < 0) {
                if (errno == EINTR)
                    continue;
                err = errno;
                break;
            }
            sent += (size_t)k;
            while (k > 0 && msg.msg_iovlen > 0) { /* step past what the socket took */
                if ((size_t)k >= msg.msg_iov->iov_len) {
                    k -= (ssize_t)msg.msg_iov->iov_len;
                    msg.msg_iov++;
                    msg.msg_iovlen--;
                } else {
                    msg.msg_iov->iov_base = (char *)msg.msg_iov->iov_base + k;
                    msg.msg_iov->iov_len -= (size_t)k;
                    k = 0;
                }
            }
        }
        if (sent == len || (err != EAGAIN && err != EWOULDBLOCK)) {
            if (sent < len)
                ch->state = FAILED;
            result = Py_NewRef(Py_None);
        } else if ((result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(len - sent))) != NULL) {
            char *p = PyBytes_AS_STRING(result);
            for (size_t i = 0; i < msg.msg_iovlen; i++) {
                memcpy(p, msg.msg_iov[i].iov_base, msg.msg_iov[i].iov_len);
                p += msg.msg_iov[i].iov_len;
            }
        }
    }
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&bufs[i]);
    return result;
}

static PyObject *
send_thread_send(SendThread *t, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "send(channel, parts: list, now: bool)");
        return NULL;
    }
    Channel *ch = lookup(t, args[0]);
    if (ch == NULL)
        return NULL;
    PyObject *parts = args[1];
    Py_ssize_t n = PyList_GET_SIZE(parts);
    int now = PyObject_IsTrue(args[2]);
    if (now < 0)
        return NULL;
    if (now && __atomic_load_n(&ch->inflight, __ATOMIC_ACQUIRE) == 0 && ch->state == OPEN && n <= MAX_NOW_PARTS)
        return send_now(ch, parts, n);
    size_t len = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_buffer b;
        if (PyObject_GetBuffer(PyList_GET_ITEM(parts, i), &b, PyBUF_SIMPLE) < 0)
            return NULL;
        len += (size_t)b.len;
        PyBuffer_Release(&b);
    }
    Item *it = malloc(sizeof(Item) + len);
    if (it == NULL)
        return PyErr_NoMemory();
    it->next = NULL;
    it->ch = ch;
    it->close = 0;
    it->len = len;
    size_t off = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_buffer b;
        if (PyObject_GetBuffer(PyList_GET_ITEM(parts, i), &b, PyBUF_SIMPLE) < 0 || off + (size_t)b.len > len) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "send: a part grew while it was copied");
            free(it);
            return NULL;
        }
        memcpy(it->data + off, b.buf, b.len);
        off += (size_t)b.len;
        PyBuffer_Release(&b);
    }
    it->len = off;
    if (enqueue(t, it, now) < 0) { /* a send asked for now that must queue wakes the thread */
        free(it);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
send_thread_take(SendThread *t, PyObject *arg)
{
    long id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    if (id < 0 || id >= t->nchannels || t->channels[id] == NULL)
        Py_RETURN_NONE; /* closed already */
    Channel *ch = t->channels[id];
    pthread_mutex_lock(&t->mu);
    t->taking++;
    while (t->busy)
        pthread_cond_wait(&t->idle, &t->mu);
    /* The thread is between batches: what it has not sent of this channel is in its stash and the queue. */
    int failed = 0;
    Item **link = &t->head, *last = NULL;
    while (*link != NULL) {
        Item *it = *link;
        if (it->ch == ch) {
            if (ch->state != FAILED && stash_append(ch, it->data, it->len) < 0)
                failed = 1;
            t->queued -= it->len;
            if (!it->close)
                __atomic_sub_fetch(&ch->inflight, 1, __ATOMIC_RELEASE);
            *link = it->next;
            free(it);
        } else {
            last = it;
            link = &it->next;
        }
    }
    t->tail = last;
    t->taking--;
    if (t->head != NULL && t->sleeping)
        pthread_cond_signal(&t->work);
    PyObject *result = NULL;
    if (failed)
        PyErr_NoMemory();
    else if (ch->state == FAILED || ch->stash_len == 0)
        result = Py_NewRef(Py_None);
    else
        result = PyBytes_FromStringAndSize((const char *)ch->stash, ch->stash_len);
    if (ch->state != FAILED)
        ch->state = OPEN;
    ch->stash_len = 0;
    pthread_mutex_unlock(&t->mu);
    return result;
}

static PyObject *
send_thread_close(SendThread *t, PyObject *arg)
{
    Channel *ch = lookup(t, arg);
    if (ch == NULL)
        return NULL;
    Item *it = malloc(sizeof(Item));
    if (it == NULL)
        return PyErr_NoMemory();
    it->next = NULL;
    it->ch = ch;
    it->close = 1;
    it->len = 0;
    t->channels[ch->fd] = NULL;
    if (enqueue(t, it, 1) < 0) { /* stopped: nothing will send to it any more */
        PyErr_Clear();
        free(it);
        channel_free(ch);
    }
    Py_RETURN_NONE;
}

static PyObject *
send_thread_kick(SendThread *t, PyObject *unused)
{
    pthread_mutex_lock(&t->mu);
    if (t->head != NULL && t->sleeping)
        pthread_cond_signal(&t->work);
    pthread_mutex_unlock(&t->mu);
    Py_RETURN_NONE;
}

static PyObject *
send_thread_stalled(SendThread *t, PyObject *unused)
{
    pthread_mutex_lock(&t->mu);
    PyObject *ids = PyList_New(t->nstalled);
    for (Py_ssize_t i = 0; ids != NULL && i < t->nstalled; i++) {
        PyObject *id = PyLong_FromLong(t->stalled[i]);
        if (id == NULL) {
            Py_CLEAR(ids);
            break;
        }
        PyList_SET_ITEM(ids, i, id);
    }
    if (ids != NULL)
        t->nstalled = 0;
    pthread_mutex_unlock(&t->mu);
    return ids;
}

static void
send_thread_join(SendThread *t)
{
    if (!t->started || t->joined)
        return;
    stop_thread(t->thread, &t->mu, &t->work, &t->stopping); /* after what is queued */
    t->joined = 1;
}

static PyObject *
send_thread_stop(SendThread *t, PyObject *unused)
{
    send_thread_join(t);
    Py_RETURN_NONE;
}

static void
send_thread_dealloc(SendThread *t)
{
    send_thread_join(t);
    for (Py_ssize_t i = 0; i < t->nchannels; i++)
        if (t->channels[i] != NULL)
            channel_free(t->channels[i]);
    free(t->channels);
    free(t->stalled);
    if (t->started) {
        pthread_cond_destroy(&t->idle);
        pthread_cond_destroy(&t->work);
        pthread_mutex_destroy(&t->mu);
    }
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyMethodDef send_thread_methods[] = {
    {"open", (PyCFunction)send_thread_open, METH_O, "open(sock or fd) -> channel id: a dup of the socket to send on."},
    {"send", (PyCFunction)(void (*)(void))send_thread_send, METH_FASTCALL,
     "send(channel, parts, now) -> None or bytes: the parts (bytes-like) to leave in one piece after what is queued. "
     "With now, and nothing of the channel queued, sent on the caller's thread: returns what the socket did not "
     "take. Else copied into the queue: a busy thread finds them, a sleeping one waits for kick()."},
    {"kick", (PyCFunction)send_thread_kick, METH_NOARGS, "kick(): wake the thread if it sleeps with items queued."},
    {"take", (PyCFunction)send_thread_take, METH_O,
     "take(channel) -> bytes or None: what is not sent yet, taken back; the channel sends again after it."},
    {"stalled", (PyCFunction)send_thread_stalled, METH_NOARGS,
     "stalled() -> ids of the channels that stalled since the last call (their bytes wait for take())."},
    {"close", (PyCFunction)send_thread_close, METH_O, "close(channel): close its dup once what is queued is sent."},
    {"stop", (PyCFunction)send_thread_stop, METH_NOARGS, "stop(): send what is queued, end the thread."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SendThreadType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gateway.remoting._sender.SendThread",
    .tp_doc = "SendThread(notify_fd): socket writes on a thread that never takes the GIL; a byte is written to "
              "notify_fd when a channel stalls.",
    .tp_basicsize = sizeof(SendThread),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)send_thread_init,
    .tp_dealloc = (destructor)send_thread_dealloc,
    .tp_methods = send_thread_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gateway.remoting._sender",
    "Socket writes off the reactor thread (see gateway.remoting.sender).", -1, NULL,
};

PyMODINIT_FUNC
PyInit__sender(void)
{
    if (PyType_Ready(&SendThreadType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&SendThreadType);
    if (PyModule_AddObject(m, "SendThread", (PyObject *)&SendThreadType) < 0) {
        Py_DECREF(&SendThreadType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
