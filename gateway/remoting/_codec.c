/* The frame codec's hot path in C: frame splitting, the ROCKETMQ binary header both ways, and the fields of a
 * custom header from extFields.
 *
 * gateway/remoting/codec.py and headers.py hold the reference implementation in Python and select this module
 * when it was built; both give the same commands, bytes and exceptions (the tests run both). Every length read from the
 * wire is checked against the bytes actually there before it is used. Anything unusual on the encode side (a
 * non-dict extFields, a key that is not a str) is handed back to the Python implementation rather than
 * handled twice.
 */
#include "../_native.h"
#include "send_frame.h"

/* Set once by setup(): the classes and tables codec.py owns. */
static PyObject *Command;            /* RemotingCommand */
static PyObject *ProtocolError;      /* codec.ProtocolError */
static PyObject *StructError;        /* struct.error, raised for values out of a field's range */
static PyObject *LanguageNames;      /* tuple of 256 language names by code ("OTHER" where none) */
static PyObject *LanguageValues;     /* dict: language name -> code */
static PyObject *LanguageOther;      /* LanguageCode.OTHER's value, an int */
static PyObject *SerializeRocketmq;  /* SerializeType.ROCKETMQ */
static PyObject *DecodeJsonHeader;   /* decode_json_header(bytes) -> RemotingCommand */
static PyObject *ExtValue;           /* _ext_value(object) -> str */
static PyObject *EncodeHeaderPy;     /* the Python encode_rocketmq_header, for the unusual cases */
static PyObject *JsonLoads;          /* orjson.loads */
static PyObject *JsonDumps;          /* orjson.dumps */
static PyObject *JsonCommandPy;      /* _json_command(obj) -> RemotingCommand, for the unusual headers */
static PyObject *EncodeJsonPy;       /* the Python encode_json_header, for the unusual cases */
static PyObject *EmptyBytes;
static PyObject *BodyName;           /* "body" */
static PyObject *Zero;               /* 0 */
/* The JSON header's keys, interned once, in RemotingCommand's argument order up to extFields: code, opaque, flag,
 * language, version, remark, extFields; then serializeTypeCurrentRPC with its value "JSON" and the default
 * language "JAVA". */
enum { J_CODE, J_OPAQUE, J_FLAG, J_LANGUAGE, J_VERSION, J_REMARK, J_EXT, J_STYPE, J_JSON, J_JAVA, N_JSON };
static const char *const JsonNames[N_JSON] = {"code",      "opaque",    "flag",
                                              "language",  "version",   "remark",
                                              "extFields", "serializeTypeCurrentRPC", "JSON", "JAVA"};
static PyObject *JsonKeys[N_JSON];

/* Set once by setup_headers(): what gateway.remoting.headers' decoders use. */
static PyObject *HeaderError;        /* headers.HeaderError */
static PyObject *ToIntOrNone;        /* Long.parseLong's rules: int, or None where Java leaves the field unset */
static PyObject *IsTrue;             /* v.lower() == "true", for text that is not ASCII */
static PyObject *CheckName;          /* check_name(kind, name): raises for an illegal topic or group, remembers it */
static PyObject *KnownTopics;        /* set of topic names found legal */
static PyObject *KnownGroups;        /* set of group names found legal */

#define SERIALIZE_JSON 0
#define SERIALIZE_ROCKETMQ 1

static int
ready(void)
{
    if (Command == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gateway.remoting._codec.setup() was not called");
        return 0;
    }
    return 1;
}

/* UTF-8 text of the wire, or NULL with ProtocolError set (codec.py: "bad UTF-8 in ROCKETMQ header: ..."). */
static PyObject *
utf8(const unsigned char *p, Py_ssize_t n)
{
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    if (s == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        PyErr_Format(ProtocolError, "bad UTF-8 in ROCKETMQ header: %S", value);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
    return s;
}

static PyObject *
truncated(void)
{
    PyErr_SetString(ProtocolError, "truncated ROCKETMQ header");
    return NULL;
}

/* One length-prefixed field at *pos (a `size`-byte signed length, 2 or 4, then that many bytes): its start and
 * length, *pos moved past it. -1 with ProtocolError set when the length is not there ("truncated") or does not
 * fit in the n bytes (`what`). */
static int
take(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos, int size, const char *what, Py_ssize_t *start,
     Py_ssize_t *len)
{
    if (n - *pos < size) {
        truncated();
        return -1;
    }
    Py_ssize_t l = size == 2 ? get16(p + *pos) : get32(p + *pos);
    Py_ssize_t s = *pos + size;
    if (l < 0 || l > n - s) {
        PyErr_SetString(ProtocolError, what);
        return -1;
    }
    *start = s;
    *len = l;
    *pos = s + l;
    return 0;
}

/* The extFields map: (int16 key length, key, int32 value length, value)... */
static PyObject *
decode_ext_fields(const unsigned char *p, Py_ssize_t n)
{
    PyObject *ext = PyDict_New();
    if (ext == NULL)
        return NULL;
    Py_ssize_t pos = 0, kpos, klen, vpos, vlen;
    while (pos < n) {
        if (take(p, n, &pos, 2, "bad extFields key length", &kpos, &klen) < 0 ||
            take(p, n, &pos, 4, "bad extFields value length", &vpos, &vlen) < 0)
            goto error;
        PyObject *key = utf8(p + kpos, klen);
        if (key == NULL)
            goto error;
        PyObject *value = utf8(p + vpos, vlen);
        if (value == NULL) {
            Py_DECREF(key);
            goto error;
        }
        int rc = PyDict_SetItem(ext, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (rc < 0)
            goto error;
    }
    return ext;
error:
    Py_DECREF(ext);
    return NULL;
}

/* A RemotingCommand from a ROCKETMQ header: code int16, language byte, version int16, opaque int32, flag int32,
 * then the remark and the extFields map, each behind an int32 length. */
static PyObject *
decode_header(const unsigned char *p, Py_ssize_t n, PyObject *body)
{
    if (n < 13)
        return truncated();
    Py_ssize_t pos = 13, remark_pos, remark_len, ext_pos, ext_len;
    if (take(p, n, &pos, 4, "bad remark length", &remark_pos, &remark_len) < 0)
        return NULL;
    PyObject *remark = Py_None, *ext = Py_None, *result = NULL;
    Py_INCREF(Py_None);
    Py_INCREF(Py_None);
    PyObject *args[9] = {NULL};
    if (remark_len) {
        Py_DECREF(remark);
        if ((remark = utf8(p + remark_pos, remark_len)) == NULL)
            goto done;
    }
    if (take(p, n, &pos, 4, "bad extFields length", &ext_pos, &ext_len) < 0)
        goto done;
    if (ext_len) {
        Py_DECREF(ext);
        if ((ext = decode_ext_fields(p + ext_pos, ext_len)) == NULL)
            goto done;
    }
    /* RemotingCommand(code, opaque, flag, language, version, remark, ext_fields, body, serialize_type) */
    args[0] = PyLong_FromLong(get16(p));
    args[1] = PyLong_FromLong(get32(p + 5));
    args[2] = PyLong_FromLong(get32(p + 9));
    args[4] = PyLong_FromLong(get16(p + 3));
    if (args[0] == NULL || args[1] == NULL || args[2] == NULL || args[4] == NULL)
        goto done;
    args[3] = PyTuple_GET_ITEM(LanguageNames, p[2]);
    args[5] = remark;
    args[6] = ext;
    args[7] = body;
    args[8] = SerializeRocketmq;
    result = PyObject_Vectorcall(Command, args, 9, NULL);
done:
    Py_XDECREF(args[0]);
    Py_XDECREF(args[1]);
    Py_XDECREF(args[2]);
    Py_XDECREF(args[4]);
    Py_XDECREF(remark);
    Py_XDECREF(ext);
    return result;
}

static PyObject *
codec_decode_rocketmq_header(PyObject *self, PyObject *arg)
{
    if (!ready())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = decode_header(view.buf, view.len, EmptyBytes);
    PyBuffer_Release(&view);
    return result;
}

/* cmd from a Python decoder, with its body set (NULL as it came, or on failure). */
static PyObject *
with_body(PyObject *cmd, PyObject *body)
{
    if (cmd != NULL && body != EmptyBytes && PyObject_SetAttr(cmd, BodyName, body) < 0)
        Py_CLEAR(cmd);
    return cmd;
}

/* Whether every value of the dict is exactly a str (what Java peers send in extFields). */
static int
all_str_values(PyObject *dict)
{
    Py_ssize_t i = 0;
    PyObject *k, *v;
    while (PyDict_Next(dict, &i, &k, &v))
        if (!PyUnicode_CheckExact(v))
            return 0;
    return 1;
}

/* The command of a parsed JSON header, as codec.py's _json_command, for the usual header: code, opaque, flag and
 * version ints (absent: 0), language a str (absent: "JAVA"), remark a str or null, extFields a dict of strs or
 * null. Anything else goes to _json_command. */
static PyObject *
json_command(PyObject *obj, PyObject *body)
{
    PyObject *args[8]; /* RemotingCommand(code, opaque, flag, language, version, remark, ext_fields, body) */
    if (!PyDict_CheckExact(obj))
        goto python;
    for (int j = J_CODE; j <= J_EXT; j++) {
        PyObject *v = PyDict_GetItemWithError(obj, JsonKeys[j]);
        if (v == NULL && PyErr_Occurred())
            return NULL;
        if (j == J_LANGUAGE) {
            if (v == NULL)
                v = JsonKeys[J_JAVA];
            else if (!PyUnicode_CheckExact(v))
                goto python;
        }
        else if (j < J_REMARK) { /* code, opaque, flag, version */
            if (v == NULL)
                v = Zero;
            else if (!PyLong_CheckExact(v))
                goto python;
        }
        else if (v == NULL || v == Py_None)
            v = Py_None;
        else if (j == J_REMARK ? !PyUnicode_CheckExact(v) : !PyDict_CheckExact(v) || !all_str_values(v))
            goto python;
        args[j] = v;
    }
    args[7] = body;
    return PyObject_Vectorcall(Command, args, 8, NULL);
python:
    return with_body(PyObject_CallOneArg(JsonCommandPy, obj), body);
}

/* A command from a JSON header: orjson parses it, json_command builds it; a header orjson refuses goes to
 * codec.py's decode_json_header for its ProtocolError. */
static PyObject *
decode_json(const unsigned char *p, Py_ssize_t n, PyObject *body)
{
    PyObject *header = PyBytes_FromStringAndSize((const char *)p, n);
    if (header == NULL)
        return NULL;
    PyObject *cmd = NULL, *obj = PyObject_CallOneArg(JsonLoads, header);
    if (obj != NULL) {
        cmd = json_command(obj, body);
        Py_DECREF(obj);
    }
    else if (PyErr_ExceptionMatches(PyExc_ValueError)) { /* orjson.JSONDecodeError */
        PyErr_Clear();
        cmd = with_body(PyObject_CallOneArg(DecodeJsonHeader, header), body);
    }
    Py_DECREF(header);
    return cmd;
}

/* feed(buffer: bytearray, max_frame_length: int) -> list[RemotingCommand]: every complete frame at the start of
 * buffer, which loses them (a partial frame stays); ProtocolError for a frame that cannot be valid. */
static PyObject *
codec_feed(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!ready())
        return NULL;
    if (nargs != 2 || !PyByteArray_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "feed(buffer: bytearray, max_frame_length: int)");
        return NULL;
    }
    PyObject *buf = args[0];
    long long max_frame_length = PyLong_AsLongLong(args[1]);
    if (max_frame_length == -1 && PyErr_Occurred())
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Py_ssize_t pos = 0;
    int failed = 0;
    for (;;) {
        /* Re-read after every call into Python: nothing should resize the buffer, but nothing is assumed. */
        const unsigned char *p = (const unsigned char *)PyByteArray_AS_STRING(buf);
        Py_ssize_t end = PyByteArray_GET_SIZE(buf);
        if (end - pos < 4)
            break;
        long long length = get32(p + pos);
        if (length < 4 || length + 4 > max_frame_length) {
            PyErr_Format(ProtocolError, "bad frame length %lld", length);
            failed = 1;
            break;
        }
        if (end - pos - 4 < length)
            break;
        uint32_t info = (uint32_t)get32(p + pos + 4);
        unsigned stype = (info >> 24) & 0xFF;
        Py_ssize_t hlen = info & 0xFFFFFF;
        if (hlen > length - 4) {
            PyErr_SetString(ProtocolError, "bad header length");
            failed = 1;
            break;
        }
        Py_ssize_t hstart = pos + 8, bstart = hstart + hlen, fend = pos + 4 + (Py_ssize_t)length;
        PyObject *body = fend > bstart ? PyBytes_FromStringAndSize((const char *)p + bstart, fend - bstart) : EmptyBytes;
        if (body == NULL) {
            failed = 1;
            break;
        }
        if (body == EmptyBytes)
            Py_INCREF(body);
        PyObject *cmd = NULL;
        if (stype == SERIALIZE_ROCKETMQ) {
            cmd = decode_header(p + hstart, hlen, body);
        } else if (stype == SERIALIZE_JSON) {
            cmd = decode_json(p + hstart, hlen, body);
        } else {
            PyErr_Format(ProtocolError, "unknown serialize type %u", stype);
        }
        Py_DECREF(body);
        if (cmd == NULL) {
            failed = 1;
            break;
        }
        int rc = PyList_Append(out, cmd);
        Py_DECREF(cmd);
        if (rc < 0) {
            failed = 1;
            break;
        }
        pos = fend;
    }
    if (pos) {
        /* Keep the exception (if any) across the slice deletion. */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (PySequence_DelSlice(buf, 0, pos) < 0) {
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
            Py_DECREF(out);
            return NULL;
        }
        PyErr_Restore(type, value, tb);
    }
    if (failed) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* RemotingCommand's attributes the encoder reads, interned once: a lookup by C string builds the name each time. */
enum { A_CODE, A_LANGUAGE, A_VERSION, A_OPAQUE, A_FLAG, A_REMARK, A_EXT_FIELDS, N_ATTRS };
static const char *const AttrNames[N_ATTRS] = {"code", "language", "version", "opaque", "flag", "remark", "ext_fields"};
static PyObject *Attrs[N_ATTRS];

/* An integer attribute within [lo, hi], or -1 with struct.error set, as struct.pack would refuse it. */
static int
int_attr(PyObject *cmd, int attr, long long lo, long long hi, long long *out)
{
    PyObject *v = PyObject_GetAttr(cmd, Attrs[attr]);
    if (v == NULL)
        return -1;
    int rc = packable_int(v, lo, hi, StructError, AttrNames[attr], out);
    Py_DECREF(v);
    return rc;
}

static PyObject *
encode_in_python(PyObject *cmd)
{
    return PyObject_CallOneArg(EncodeHeaderPy, cmd);
}

/* encode_json_header(cmd) -> bytes, as codec.py's: fastjson's key order, remark and extFields left out when
 * None; orjson writes it. A command whose extFields is not a dict of strs goes to the Python encoder. */
static PyObject *
codec_encode_json_header(PyObject *self, PyObject *cmd)
{
    if (!ready())
        return NULL;
    PyObject *v[N_ATTRS] = {NULL}, *obj = NULL, *result = NULL;
    for (int a = 0; a < N_ATTRS; a++)
        if ((v[a] = PyObject_GetAttr(cmd, Attrs[a])) == NULL)
            goto done;
    PyObject *ext = v[A_EXT_FIELDS];
    if (ext != Py_None && (!PyDict_CheckExact(ext) || !all_str_values(ext))) {
        result = PyObject_CallOneArg(EncodeJsonPy, cmd);
        goto done;
    }
    if ((obj = PyDict_New()) == NULL || PyDict_SetItem(obj, JsonKeys[J_CODE], v[A_CODE]) < 0 ||
        (ext != Py_None && PyDict_SetItem(obj, JsonKeys[J_EXT], ext) < 0) ||
        PyDict_SetItem(obj, JsonKeys[J_FLAG], v[A_FLAG]) < 0 ||
        PyDict_SetItem(obj, JsonKeys[J_LANGUAGE], v[A_LANGUAGE]) < 0 ||
        PyDict_SetItem(obj, JsonKeys[J_OPAQUE], v[A_OPAQUE]) < 0 ||
        (v[A_REMARK] != Py_None && PyDict_SetItem(obj, JsonKeys[J_REMARK], v[A_REMARK]) < 0) ||
        PyDict_SetItem(obj, JsonKeys[J_STYPE], JsonKeys[J_JSON]) < 0 ||
        PyDict_SetItem(obj, JsonKeys[J_VERSION], v[A_VERSION]) < 0)
        goto done;
    result = PyObject_CallOneArg(JsonDumps, obj);
done:
    Py_XDECREF(obj);
    for (int a = 0; a < N_ATTRS; a++)
        Py_XDECREF(v[a]);
    return result;
}

/* encode_rocketmq_header(cmd) -> bytes, as codec.py's: None keys and values are left out, non-str values
 * become Java's strings (_ext_value). */
static PyObject *
codec_encode_rocketmq_header(PyObject *self, PyObject *cmd)
{
    if (!ready())
        return NULL;
    long long code, version, opaque, flag, lang;
    if (int_attr(cmd, A_CODE, INT16_MIN, INT16_MAX, &code) < 0)
        return NULL;
    PyObject *language = PyObject_GetAttr(cmd, Attrs[A_LANGUAGE]);
    if (language == NULL)
        return NULL;
    PyObject *lang_value = PyDict_GetItemWithError(LanguageValues, language);
    Py_DECREF(language);
    if (lang_value == NULL) {
        if (PyErr_Occurred())
            return NULL;
        lang_value = LanguageOther;
    }
    lang = PyLong_AsLongLong(lang_value);
    if (lang == -1 && PyErr_Occurred())
        return NULL;
    if (int_attr(cmd, A_VERSION, INT16_MIN, INT16_MAX, &version) < 0 ||
        int_attr(cmd, A_OPAQUE, INT32_MIN, INT32_MAX, &opaque) < 0 ||
        int_attr(cmd, A_FLAG, INT32_MIN, INT32_MAX, &flag) < 0)
        return NULL;

    PyObject *remark = PyObject_GetAttr(cmd, Attrs[A_REMARK]);
    if (remark == NULL)
        return NULL;
    PyObject *ext = PyObject_GetAttr(cmd, Attrs[A_EXT_FIELDS]);
    if (ext == NULL) {
        Py_DECREF(remark);
        return NULL;
    }
    PyObject *result = NULL, *items = NULL;
    const char *remark_utf8 = NULL;
    Py_ssize_t remark_len = 0;
    if (remark != Py_None && !(PyUnicode_Check(remark) && PyUnicode_GET_LENGTH(remark) == 0)) {
        if (!PyUnicode_Check(remark)) {
            result = encode_in_python(cmd);
            goto done;
        }
        if ((remark_utf8 = PyUnicode_AsUTF8AndSize(remark, &remark_len)) == NULL)
            goto done;
    }
    if (ext != Py_None && !PyDict_Check(ext)) {
        result = encode_in_python(cmd);
        goto done;
    }
    /* The entries to write, as str key, str value, ... (non-str values as Java's strings): the bytes are written
     * from this list, which nothing else can change, not from the dict. */
    if ((items = PyList_New(0)) == NULL)
        goto done;
    Py_ssize_t ext_size = 0, i = 0;
    PyObject *k, *v;
    while (ext != Py_None && PyDict_Next(ext, &i, &k, &v)) {
        if (k == Py_None || v == Py_None)
            continue;
        if (!PyUnicode_Check(k)) {
            result = encode_in_python(cmd);
            goto done;
        }
        if (PyList_Append(items, k) < 0)
            goto done;
        if (PyUnicode_Check(v)) {
            if (PyList_Append(items, v) < 0)
                goto done;
        } else {
            PyObject *s = PyObject_CallOneArg(ExtValue, v);
            if (s == NULL)
                goto done;
            int rc = PyUnicode_Check(s) ? PyList_Append(items, s) : -1;
            if (rc < 0 && !PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "_ext_value did not return a str");
            Py_DECREF(s);
            if (rc < 0)
                goto done;
        }
    }
    Py_ssize_t n_items = PyList_GET_SIZE(items);
    for (Py_ssize_t j = 0; j < n_items; j += 2) {
        Py_ssize_t klen, vlen;
        if (PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(items, j), &klen) == NULL ||
            PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(items, j + 1), &vlen) == NULL)
            goto done;
        if (klen > INT16_MAX) {
            PyErr_SetString(StructError, "extFields key longer than 32767 bytes");
            goto done;
        }
        if (vlen > INT32_MAX - 6 - klen || ext_size > INT32_MAX - 6 - klen - vlen) {
            PyErr_SetString(StructError, "extFields longer than 2 GiB");
            goto done;
        }
        ext_size += 2 + klen + 4 + vlen;
    }
    result = PyBytes_FromStringAndSize(NULL, 13 + 4 + remark_len + 4 + ext_size);
    if (result == NULL)
        goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    put16(out, (int)code);
    out[2] = (unsigned char)lang;
    put16(out + 3, (int)version);
    put32(out + 5, opaque);
    put32(out + 9, flag);
    put32(out + 13, remark_len);
    out += 17;
    if (remark_len) {
        memcpy(out, remark_utf8, remark_len);
        out += remark_len;
    }
    put32(out, ext_size);
    out += 4;
    for (Py_ssize_t j = 0; j < n_items; j += 2) {
        Py_ssize_t klen, vlen;
        /* Both UTF-8 forms are cached in the str objects by the sizing loop. */
        const char *kb = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(items, j), &klen);
        const char *vb = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(items, j + 1), &vlen);
        put16(out, (int)klen);
        memcpy(out + 2, kb, klen);
        out += 2 + klen;
        put32(out, vlen);
        memcpy(out + 4, vb, vlen);
        out += 4 + vlen;
    }
done:
    Py_DECREF(remark);
    Py_DECREF(ext);
    Py_XDECREF(items);
    if (PyErr_Occurred())
        Py_CLEAR(result);
    return result;
}


/* Header field kinds, as headers.py numbers them. */
enum { KIND_STR, KIND_INT, KIND_BOOL, KIND_TOPIC, KIND_GROUP };

/* An ASCII str of 1..18 decimal digits (Python's isascii() and isdigit() and len < 19) as an int, else NULL
 * without an exception set. */
static PyObject *
small_decimal(PyObject *v)
{
    if (!PyUnicode_IS_ASCII(v))
        return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(v);
    if (n < 1 || n > 18)
        return NULL;
    const Py_UCS1 *c = PyUnicode_1BYTE_DATA(v);
    long long x = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (c[i] < '0' || c[i] > '9')
            return NULL;
        x = x * 10 + (c[i] - '0');
    }
    return PyLong_FromLongLong(x);
}

/* One field's value (a new reference) from its wire value `v` (borrowed, may be NULL for absent); NULL with an
 * exception set, or NotImplemented (a value that is not a str) for the Python decoder to handle. */
static PyObject *
field_value(PyObject *v, long kind, int required)
{
    if (v == NULL || v == Py_None || kind == KIND_STR) {
        if (v == NULL)
            v = Py_None;
        Py_INCREF(v);
        return v;
    }
    if (!PyUnicode_Check(v))
        Py_RETURN_NOTIMPLEMENTED;
    if (kind == KIND_INT) {
        PyObject *x = small_decimal(v);
        return x != NULL || PyErr_Occurred() ? x : PyObject_CallOneArg(ToIntOrNone, v);
    }
    if (kind == KIND_BOOL) {
        if (!PyUnicode_IS_ASCII(v))
            return PyObject_CallOneArg(IsTrue, v);
        const Py_UCS1 *c = PyUnicode_1BYTE_DATA(v);
        int yes = PyUnicode_GET_LENGTH(v) == 4 && (c[0] | 0x20) == 't' && (c[1] | 0x20) == 'r' &&
                  (c[2] | 0x20) == 'u' && (c[3] | 0x20) == 'e';
        return PyBool_FromLong(yes);
    }
    /* A topic or a group: optional and blank is absent; a name not seen before is checked (and remembered). */
    if (!required && PyUnicode_GET_LENGTH(v) == 0)
        Py_RETURN_NONE;
    int known = PySet_Contains(kind == KIND_TOPIC ? KnownTopics : KnownGroups, v);
    if (known < 0)
        return NULL;
    if (!known) {
        PyObject *kind_obj = PyLong_FromLong(kind);
        if (kind_obj == NULL)
            return NULL;
        PyObject *r = PyObject_CallFunctionObjArgs(CheckName, kind_obj, v, NULL);
        Py_DECREF(kind_obj);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    Py_INCREF(v);
    return v;
}

/* decode_fields(ext, spec) -> tuple of field values, or NotImplemented when ext or one of its values is not what
 * a decoded command carries (the Python decoder then runs). spec: (wire key, kind, required, default,
 * message when missing) per field, in the dataclass's order. */
static PyObject *
codec_decode_fields(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (HeaderError == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gateway.remoting._codec.setup_headers() was not called");
        return NULL;
    }
    if (nargs != 2 || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "decode_fields(ext, spec: tuple)");
        return NULL;
    }
    PyObject *ext = args[0], *spec = args[1];
    if (ext != Py_None && !PyDict_CheckExact(ext))
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t n = PyTuple_GET_SIZE(spec);
    PyObject *out = PyTuple_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *f = PyTuple_GET_ITEM(spec, i);
        if (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 5) {
            PyErr_SetString(PyExc_TypeError, "a field spec is (key, kind, required, default, message)");
            goto error;
        }
        PyObject *v = NULL;
        if (ext != Py_None && (v = PyDict_GetItemWithError(ext, PyTuple_GET_ITEM(f, 0))) == NULL && PyErr_Occurred())
            goto error;
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(f, 1));
        int required = PyObject_IsTrue(PyTuple_GET_ITEM(f, 2));
        if ((kind == -1 || required < 0) && PyErr_Occurred())
            goto error;
        PyObject *value = field_value(v, kind, required);
        if (value == NULL)
            goto error;
        if (value == Py_NotImplemented) {
            Py_DECREF(out);
            return value;
        }
        if (value == Py_None) {
            Py_DECREF(value);
            if (required) {
                PyErr_SetObject(HeaderError, PyTuple_GET_ITEM(f, 4));
                goto error;
            }
            value = PyTuple_GET_ITEM(f, 3);
            Py_INCREF(value);
        }
        PyTuple_SET_ITEM(out, i, value);
    }
    return out;
error:
    Py_DECREF(out);
    return NULL;
}

static PyObject *
codec_setup_headers(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"header_error", "to_int_or_none", "is_true", "check_name", "known_topics",
                            "known_groups", NULL};
    PyObject *o[6];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOO!O!:setup_headers", names, &o[0], &o[1], &o[2], &o[3],
                                     &PySet_Type, &o[4], &PySet_Type, &o[5]))
        return NULL;
    PyObject **slots[6] = {&HeaderError, &ToIntOrNone, &IsTrue, &CheckName, &KnownTopics, &KnownGroups};
    for (int j = 0; j < 6; j++) {
        Py_INCREF(o[j]);
        Py_XSETREF(*slots[j], o[j]);
    }
    Py_RETURN_NONE;
}

static PyObject *
codec_setup(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"command",        "protocol_error",     "struct_error", "language_names",
                            "language_values", "language_other",    "serialize_rocketmq", "decode_json_header",
                            "ext_value",      "encode_rocketmq_header", "json_loads", "json_dumps",
                            "json_command",   "encode_json_header", NULL};
    PyObject *o[14];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO!O!OOOOOOOOO:setup", names, &o[0], &o[1], &o[2],
                                     &PyTuple_Type, &o[3], &PyDict_Type, &o[4], &o[5], &o[6], &o[7], &o[8], &o[9],
                                     &o[10], &o[11], &o[12], &o[13]))
        return NULL;
    if (PyTuple_GET_SIZE(o[3]) != 256) {
        PyErr_SetString(PyExc_ValueError, "language_names must have 256 entries");
        return NULL;
    }
    PyObject **slots[14] = {&Command,       &ProtocolError, &StructError, &LanguageNames,    &LanguageValues,
                            &LanguageOther, &SerializeRocketmq, &DecodeJsonHeader, &ExtValue, &EncodeHeaderPy,
                            &JsonLoads,     &JsonDumps,     &JsonCommandPy, &EncodeJsonPy};
    for (int j = 0; j < 14; j++) {
        Py_INCREF(o[j]);
        Py_XSETREF(*slots[j], o[j]);
    }
    Py_RETURN_NONE;
}

/* Whether p[0:n] starts with the property name and 0x01 in `name_sep` (m chars). */
static int
starts_with(const char *p, Py_ssize_t n, const char *name_sep, Py_ssize_t m)
{
    return n >= m && memcmp(p, name_sep, m) == 0;
}

/* send_properties(properties, cluster) -> (stored properties, tags code, wait) or NotImplemented: message.py's
 * store_properties (every WAIT property dropped, CLUSTER added), tags_code of the TAGS property and
 * wait_store_msg_ok, in one pass over the encoded properties. NotImplemented for what Python takes: text that is
 * not ASCII, a CLUSTER the client sent. */
static PyObject *
codec_send_properties(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "send_properties(properties: str, cluster: str)");
        return NULL;
    }
    PyObject *props = args[0], *cluster = args[1];
    if (!PyUnicode_IS_ASCII(props) || !PyUnicode_IS_ASCII(cluster))
        Py_RETURN_NOTIMPLEMENTED;
    static const char CLUSTER[] = "CLUSTER\x01", WAIT[] = "WAIT\x01", TAGS[] = "TAGS\x01";
    const Py_ssize_t cluster_len = sizeof(CLUSTER) - 1, wait_len = sizeof(WAIT) - 1, tags_len = sizeof(TAGS) - 1;
    const char *p = (const char *)PyUnicode_1BYTE_DATA(props);
    Py_ssize_t n = PyUnicode_GET_LENGTH(props), cn = PyUnicode_GET_LENGTH(cluster);
    for (const char *c = p; (c = memchr(c, 'C', n - (c - p))) != NULL; c++)
        if (starts_with(c, n - (c - p), CLUSTER, cluster_len))
            Py_RETURN_NOTIMPLEMENTED;
    /* Properties are 0x02-separated; a WAIT one is dropped with the separator after it (the last one's separator
     * before it stays), and CLUSTER follows what is left behind a separator, unless that ends with one. Written
     * into room for everything, then cut to what was kept. */
    PyObject *stored = PyUnicode_New(n + 1 + cluster_len + cn, 127);
    if (stored == NULL)
        return NULL;
    char *out = (char *)PyUnicode_1BYTE_DATA(stored);
    uint32_t tags = 0;
    int tags_seen = 0, wait_seen = 0, wait = 1;
    for (Py_ssize_t s = 0;;) {
        const char *sep = memchr(p + s, 2, n - s);
        Py_ssize_t e = sep ? sep - p : n;
        if (!starts_with(p + s, e - s, WAIT, wait_len)) {
            if (sep || e > s) {
                memcpy(out, p + s, e - s);
                out += e - s;
                *out++ = 2;
            }
        }
        else if (!wait_seen) {
            /* The first WAIT decides, as property_value finds it: unless empty, only "true" (any case) waits. */
            const char *v = p + s + wait_len;
            Py_ssize_t vn = e - s - wait_len;
            wait_seen = 1;
            wait = vn == 0 || (vn == 4 && (v[0] | 32) == 't' && (v[1] | 32) == 'r' && (v[2] | 32) == 'u' &&
                               (v[3] | 32) == 'e');
        }
        if (!tags_seen && starts_with(p + s, e - s, TAGS, tags_len)) {
            tags_seen = 1;
            for (Py_ssize_t i = s + tags_len; i < e; i++)
                tags = 31 * tags + (unsigned char)p[i];
        }
        if (!sep)
            break;
        s = e + 1;
    }
    memcpy(out, CLUSTER, cluster_len);
    memcpy(out + cluster_len, PyUnicode_1BYTE_DATA(cluster), cn);
    Py_ssize_t length = out + cluster_len + cn - (char *)PyUnicode_1BYTE_DATA(stored);
    if (PyUnicode_Resize(&stored, length) < 0)
        return NULL;
    return Py_BuildValue("(NiO)", stored, (int32_t)tags, wait ? Py_True : Py_False);
}

/* A string span as a str (its escapes resolved), or None when absent; NULL with an exception set. */
static PyObject *
span_str(const Span *s)
{
    if (s->p == NULL)
        Py_RETURN_NONE;
    if (!s->escaped)
        return PyUnicode_DecodeUTF8((const char *)s->p, s->n, "strict");
    unsigned char *buf = PyMem_Malloc(s->n ? s->n : 1);
    if (buf == NULL)
        return PyErr_NoMemory();
    PyObject *str = PyUnicode_DecodeUTF8((const char *)buf, sf_unescape(s, buf), "strict");
    PyMem_Free(buf);
    return str;
}

/* parse_send_frame(frame, times=1) -> dict of send_frame.h's SendFrame (strings decoded, optional ints None when
 * absent), or None where parse_send_frame declines: for the tests, which hold it to the Python decoders, and
 * benchmarks/send_frame.py, which times the parse alone by repeating it. */
static PyObject *
codec_parse_send_frame(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t times = 1;
    if (!PyArg_ParseTuple(args, "y*|n:parse_send_frame", &view, &times))
        return NULL;
    SendFrame f;
    PyObject *d = NULL;
    int parsed = 0;
    for (Py_ssize_t i = 0; i < times; i++)
        parsed = parse_send_frame(view.buf, view.len, &f);
    if (!parsed) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    d = Py_BuildValue(
        "{si si si si si si sN sN sN sN sN sL si si si si sN sN sO sO sy#}", "code", f.code, "version", f.version,
        "opaque", f.opaque, "flag", f.flag, "language", f.language, "serialize", f.serialize, "producer_group",
        span_str(&f.producer_group), "topic", span_str(&f.topic), "default_topic", span_str(&f.default_topic),
        "properties", span_str(&f.properties), "bname", span_str(&f.bname), "born_timestamp", f.born_timestamp,
        "default_topic_queue_nums", f.default_topic_queue_nums, "queue_id", f.queue_id, "sys_flag", f.sys_flag,
        "msg_flag", f.msg_flag, "reconsume_times",
        f.has_reconsume_times ? PyLong_FromLong(f.reconsume_times) : Py_NewRef(Py_None), "max_reconsume_times",
        f.has_max_reconsume_times ? PyLong_FromLong(f.max_reconsume_times) : Py_NewRef(Py_None), "unit_mode",
        f.unit_mode ? Py_True : Py_False, "batch", f.batch ? Py_True : Py_False, "body", (const char *)f.body,
        f.body_len);
    PyBuffer_Release(&view);
    return d;
}

static PyMethodDef methods[] = {
    {"setup", (PyCFunction)(void (*)(void))codec_setup, METH_VARARGS | METH_KEYWORDS,
     "setup(...): the classes and tables of gateway.remoting.codec this module builds and raises."},
    {"feed", (PyCFunction)(void (*)(void))codec_feed, METH_FASTCALL,
     "feed(buffer, max_frame_length) -> list of RemotingCommand; the frames taken are removed from buffer."},
    {"decode_rocketmq_header", codec_decode_rocketmq_header, METH_O,
     "decode_rocketmq_header(data) -> RemotingCommand, from a binary ROCKETMQ header."},
    {"encode_rocketmq_header", codec_encode_rocketmq_header, METH_O,
     "encode_rocketmq_header(cmd) -> bytes, the binary ROCKETMQ header."},
    {"encode_json_header", codec_encode_json_header, METH_O, "encode_json_header(cmd) -> bytes, the JSON header."},
    {"setup_headers", (PyCFunction)(void (*)(void))codec_setup_headers, METH_VARARGS | METH_KEYWORDS,
     "setup_headers(...): what gateway.remoting.headers' decoders raise and call."},
    {"decode_fields", (PyCFunction)(void (*)(void))codec_decode_fields, METH_FASTCALL,
     "decode_fields(ext, spec) -> tuple of a header's field values, or NotImplemented."},
    {"send_properties", (PyCFunction)(void (*)(void))codec_send_properties, METH_FASTCALL,
     "send_properties(properties, cluster) -> (stored properties, tags code, wait), or NotImplemented."},
    {"parse_send_frame", codec_parse_send_frame, METH_VARARGS,
     "parse_send_frame(frame, times=1) -> dict of a SEND_MESSAGE(_V2) frame's fields, or None: send_frame.h, for "
     "tests and benchmarks."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gateway.remoting._codec",
    "The remoting frame codec's hot path in C (see gateway.remoting.codec for the reference).", -1, methods,
};

PyMODINIT_FUNC
PyInit__codec(void)
{
    EmptyBytes = PyBytes_FromStringAndSize(NULL, 0);
    BodyName = PyUnicode_InternFromString("body");
    Zero = PyLong_FromLong(0);
    if (EmptyBytes == NULL || BodyName == NULL || Zero == NULL)
        return NULL;
    for (int i = 0; i < N_ATTRS; i++)
        if ((Attrs[i] = PyUnicode_InternFromString(AttrNames[i])) == NULL)
            return NULL;
    for (int i = 0; i < N_JSON; i++)
        if ((JsonKeys[i] = PyUnicode_InternFromString(JsonNames[i])) == NULL)
            return NULL;
    return PyModule_Create(&module);
}
