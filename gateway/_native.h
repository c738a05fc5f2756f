/* What the C modules (gateway/remoting/_codec.c and _sender.c, gateway/store/_store.c) share: big-endian fields, as
 * the remoting frames and the store files lay them out; integers checked against a field's range the way
 * struct.pack checks them; and the life of a thread that never takes the GIL and wakes the reactor through a pipe
 * (gateway/native.py's ThreadPipe). */
#ifndef GATEWAY_NATIVE_H
#define GATEWAY_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static inline int16_t
get16(const unsigned char *p)
{
    return (int16_t)(uint16_t)(((unsigned)p[0] << 8) | p[1]);
}

static inline int32_t
get32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static inline void
put16(unsigned char *p, int64_t v)
{
    uint16_t u = (uint16_t)v;
    p[0] = (unsigned char)(u >> 8);
    p[1] = (unsigned char)u;
}

static inline void
put32(unsigned char *p, int64_t v)
{
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)(u >> 24);
    p[1] = (unsigned char)(u >> 16);
    p[2] = (unsigned char)(u >> 8);
    p[3] = (unsigned char)u;
}

static inline void
put64(unsigned char *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    put32(p, (int64_t)(u >> 32));
    put32(p + 4, (int64_t)(u & 0xFFFFFFFFu));
}

/* `o` as an integer within [lo, hi] into *out; -1 with `struct_error` set otherwise (not an integer, or out of
 * range: what struct.pack raises), `what` naming the field. */
static inline int
packable_int(PyObject *o, long long lo, long long hi, PyObject *struct_error, const char *what, long long *out)
{
    PyObject *index = PyNumber_Index(o);
    if (index == NULL) {
        PyErr_Format(struct_error, "%s: required argument is not an integer", what);
        return -1;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow || x < lo || x > hi) {
        PyErr_Format(struct_error, "%s out of range", what);
        return -1;
    }
    *out = x;
    return 0;
}

/* Start `run(arg)` on a thread called `name` (what top -H and perf show); -1 with OSError set if it could not. */
static inline int
start_thread(pthread_t *thread, void *(*run)(void *), void *arg, const char *name)
{
    int rc = pthread_create(thread, NULL, run, arg);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    pthread_setname_np(*thread, name);
    return 0;
}

/* Wake the reactor: a byte on the pipe it watches. Its write end is non-blocking and a full pipe wakes it anyway. */
static inline void
notify_reactor(int fd)
{
    const char one = 1;
    while (write(fd, &one, 1) < 0 && errno == EINTR)
        ;
}

/* Set *stopping under `mu`, wake the thread waiting on `cv` and wait, without the GIL, for it to end. */
static inline void
stop_thread(pthread_t thread, pthread_mutex_t *mu, pthread_cond_t *cv, int *stopping)
{
    pthread_mutex_lock(mu);
    *stopping = 1;
    pthread_cond_signal(cv);
    pthread_mutex_unlock(mu);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(thread, NULL);
    Py_END_ALLOW_THREADS
}

#endif
