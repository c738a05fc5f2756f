/* What the C hot paths (gateway/remoting/_codec.c, gateway/store/_store.c) share: big-endian fields, as the
 * remoting frames and the store files lay them out, and integers checked against a field's range the way
 * struct.pack checks them. */
#ifndef GATEWAY_NATIVE_H
#define GATEWAY_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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
static int
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

#endif
