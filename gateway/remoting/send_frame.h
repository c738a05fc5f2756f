/* A SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) or SEND_BATCH_MESSAGE (320, V2's one-letter keys) request frame read
 * in place: the command's fields and the send header's, as spans of the frame's bytes, with no Python object made
 * (so no GIL needed).
 *
 * The Python decoders are the reference (codec.py's frame splitting, JSON and ROCKETMQ headers; headers.py's
 * SendMessageRequestHeader.decode and decode_v2): parse_send_frame says 1 only for a frame they decode without
 * error, into exactly these values, and 0 for anything else, including what it could read but leaves to them
 * (escaped names, signed or very long numbers, a JSON header whose extFields come before its code, ...). Names are
 * checked as the decoder checks them (TopicValidator's characters and lengths); the reserved topics are the send
 * processor's concern, as in Python. Every read is bounded by the frame.
 *
 * Included by _codec.c (its parse_send_frame test entry point) and by the C send lane.
 */
#ifndef GATEWAY_SEND_FRAME_H
#define GATEWAY_SEND_FRAME_H

#include "../_native.h"

/* A string value's bytes inside the frame; p == NULL: absent. JSON strings keep their escapes on the wire
 * (every send's properties has \u0001 and \u0002): then `escaped` is set and sf_unescape gives the value. */
typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
    char escaped;
} Span;

typedef struct {
    int code, version, opaque, flag;         /* the command's code, version, opaque, flag */
    int language;                            /* LanguageCode value (a name or byte of no code: OTHER) */
    int serialize;                           /* 0 JSON, 1 ROCKETMQ */
    Span producer_group, topic, default_topic, properties, bname; /* names are never escaped */
    long long born_timestamp;
    int default_topic_queue_nums, queue_id, sys_flag, msg_flag;
    int reconsume_times, max_reconsume_times; /* valid only if has_... */
    char has_reconsume_times, has_max_reconsume_times, unit_mode, batch;
    const unsigned char *body;
    Py_ssize_t body_len;
} SendFrame;

#define SF_SEND_MESSAGE 10
#define SF_SEND_MESSAGE_V2 310
#define SF_SEND_BATCH_MESSAGE 320
/* The codes read here; the two last carry the header with one-letter keys. */
#define SF_SEND_CODE(c) ((c) == SF_SEND_MESSAGE || (c) == SF_SEND_MESSAGE_V2 || (c) == SF_SEND_BATCH_MESSAGE)
#define SF_LANGUAGE_OTHER 7

/* A name and its length, to compare with a span. */
typedef struct {
    const char *s;
    Py_ssize_t n;
} SfName;
#define SF_NAME(text) {text, sizeof(text) - 1}

static inline int
sf_is(const SfName *name, const unsigned char *p, Py_ssize_t n)
{
    return name->n == n && memcmp(name->s, p, n) == 0;
}

/* codes.py's LanguageCode names by value. */
static const SfName SfLanguages[] = {
    SF_NAME("JAVA"), SF_NAME("CPP"), SF_NAME("DOTNET"), SF_NAME("PYTHON"), SF_NAME("DELPHI"),
    SF_NAME("ERLANG"), SF_NAME("RUBY"), SF_NAME("OTHER"), SF_NAME("HTTP"), SF_NAME("GO"),
    SF_NAME("PHP"), SF_NAME("OMS"), SF_NAME("RUST"), SF_NAME("NODE_JS")};
#define SF_N_LANGUAGES ((int)(sizeof(SfLanguages) / sizeof(SfLanguages[0])))

/* The send header's fields in SendMessageRequestHeader's order, which is also V2's letters a..n. */
enum {
    SF_PRODUCER_GROUP, SF_TOPIC, SF_DEFAULT_TOPIC, SF_DEFAULT_TOPIC_QUEUE_NUMS, SF_QUEUE_ID, SF_SYS_FLAG,
    SF_BORN_TIMESTAMP, SF_FLAG, SF_PROPERTIES, SF_RECONSUME_TIMES, SF_UNIT_MODE, SF_MAX_RECONSUME_TIMES, SF_BATCH,
    SF_BNAME, SF_N_FIELDS
};
#define SF_REQUIRED ((1u << (SF_FLAG + 1)) - 1) /* producer group .. flag */
static const SfName SfFieldNames[SF_N_FIELDS] = {
    SF_NAME("producerGroup"), SF_NAME("topic"), SF_NAME("defaultTopic"), SF_NAME("defaultTopicQueueNums"),
    SF_NAME("queueId"), SF_NAME("sysFlag"), SF_NAME("bornTimestamp"), SF_NAME("flag"), SF_NAME("properties"),
    SF_NAME("reconsumeTimes"), SF_NAME("unitMode"), SF_NAME("maxReconsumeTimes"), SF_NAME("batch"),
    SF_NAME("bname")};

/* A value as the wire gave it: a string, or (JSON) a bare integer, true or false. */
enum { SF_V_STRING, SF_V_NUMBER, SF_V_TRUE, SF_V_FALSE };
typedef struct {
    Span s; /* the string, or the number's characters */
    int kind;
} SfValue;

/* The length of the one UTF-8 character at p (strict, as Python's decode: no overlong forms, no surrogates,
 * nothing past U+10FFFF), or 0. p[0] >= 0x80. */
static inline Py_ssize_t
sf_utf8_char(const unsigned char *p, Py_ssize_t n)
{
    unsigned c = p[0];
    if (c >= 0xC2 && c <= 0xDF)
        return n >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        return n >= 3 && p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        return n >= 4 && p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80 ? 4 : 0;
    }
    return 0;
}

static inline int
sf_utf8_valid(const unsigned char *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n;) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        Py_ssize_t k = sf_utf8_char(p + i, n - i);
        if (k == 0)
            return 0;
        i += k;
    }
    return 1;
}

/* Four hex digits at p (n bytes there) as *u; 0 if not. */
static inline int
sf_hex4(const unsigned char *p, Py_ssize_t n, unsigned *u)
{
    if (n < 4)
        return 0;
    unsigned x = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
            d = (c | 0x20) - 'a' + 10;
        else
            return 0;
        x = x << 4 | d;
    }
    *u = x;
    return 1;
}

/* The JSON string at p[*pos] (a '"'), checked as orjson checks it (no control characters, strict UTF-8, only
 * JSON's escapes, \u surrogates only in pairs): its inside as *s, *pos past the closing quote. 0 if not one. */
static int
sf_json_string(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos, Span *s)
{
    Py_ssize_t i = *pos + 1;
    s->escaped = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') { /* most bytes: a tight loop */
            i++;
            continue;
        }
        if (c == '"') {
            s->p = p + *pos + 1;
            s->n = i - *pos - 1;
            *pos = i + 1;
            return 1;
        }
        if (c == '\\') {
            unsigned u;
            s->escaped = 1;
            if (i + 1 >= n)
                return 0;
            c = p[i + 1];
            if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't')
                i += 2;
            else if (c != 'u' || !sf_hex4(p + i + 2, n - i - 2, &u) || (u >= 0xDC00 && u < 0xE000))
                return 0;
            else if (u < 0xD800 || u >= 0xDC00)
                i += 6;
            else if (n - i >= 12 && p[i + 6] == '\\' && p[i + 7] == 'u' && sf_hex4(p + i + 8, 4, &u) &&
                     u >= 0xDC00 && u < 0xE000)
                i += 12;
            else
                return 0;
        }
        else if (c < 0x80) /* a control character */
            return 0;
        else {
            Py_ssize_t k = sf_utf8_char(p + i, n - i);
            if (k == 0)
                return 0;
            i += k;
        }
    }
    return 0;
}

/* The value of a string span: its bytes, or with its JSON escapes resolved (sf_json_string checked them), into
 * dst, which needs room for s->n bytes (no escape grows); the length written. */
static inline Py_ssize_t
sf_unescape(const Span *s, unsigned char *dst)
{
    const unsigned char *p = s->p;
    Py_ssize_t n = s->n, o = 0;
    if (!s->escaped) {
        memcpy(dst, p, n);
        return n;
    }
    for (Py_ssize_t i = 0; i < n;) {
        const unsigned char *b = memchr(p + i, '\\', n - i);
        Py_ssize_t run = b ? b - (p + i) : n - i;
        memcpy(dst + o, p + i, run);
        o += run;
        i += run;
        if (i >= n)
            break;
        unsigned c = p[i + 1], u = 0;
        if (c != 'u') {
            dst[o++] = c == 'b' ? '\b' : c == 'f' ? '\f' : c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c;
            i += 2;
            continue;
        }
        sf_hex4(p + i + 2, 4, &u);
        i += 6;
        if (u >= 0xD800 && u < 0xDC00) { /* a pair: the low half follows */
            unsigned lo = 0xDC00;
            sf_hex4(p + i + 2, 4, &lo);
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
        }
        if (u < 0x80)
            dst[o++] = (unsigned char)u;
        else if (u < 0x800) {
            dst[o++] = (unsigned char)(0xC0 | u >> 6);
            dst[o++] = (unsigned char)(0x80 | (u & 0x3F));
        }
        else if (u < 0x10000) {
            dst[o++] = (unsigned char)(0xE0 | u >> 12);
            dst[o++] = (unsigned char)(0x80 | (u >> 6 & 0x3F));
            dst[o++] = (unsigned char)(0x80 | (u & 0x3F));
        }
        else {
            dst[o++] = (unsigned char)(0xF0 | u >> 18);
            dst[o++] = (unsigned char)(0x80 | (u >> 12 & 0x3F));
            dst[o++] = (unsigned char)(0x80 | (u >> 6 & 0x3F));
            dst[o++] = (unsigned char)(0x80 | (u & 0x3F));
        }
    }
    return o;
}

static inline void
sf_ws(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos)
{
    while (*pos < n && (p[*pos] == ' ' || p[*pos] == '\t' || p[*pos] == '\n' || p[*pos] == '\r'))
        ++*pos;
}

/* The JSON integer at p[*pos], -?(0|[1-9][0-9]*), of at most 18 digits, as *s; 0 for anything else (a fraction,
 * an exponent: a float, which no int field takes; more digits: left to Python). */
static int
sf_json_number(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos, Span *s)
{
    Py_ssize_t i = *pos, start = i;
    if (i < n && p[i] == '-')
        i++;
    Py_ssize_t digits = i;
    while (i < n && p[i] >= '0' && p[i] <= '9')
        i++;
    digits = i - digits;
    if (digits == 0 || digits > 18 || (p[i - digits] == '0' && digits > 1))
        return 0;
    if (i < n && (p[i] == '.' || p[i] == 'e' || p[i] == 'E'))
        return 0;
    s->p = p + start;
    s->n = i - start;
    s->escaped = 0;
    *pos = i;
    return 1;
}

/* 1..18 decimal digits as *x (the Python decoder's plain case); 0 for anything else. */
static inline int
sf_digits(const unsigned char *p, Py_ssize_t n, long long *x)
{
    if (n < 1 || n > 18)
        return 0;
    long long v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return 0;
        v = v * 10 + (p[i] - '0');
    }
    *x = v;
    return 1;
}

/* The literal word at p[*pos] (true, false or null), *pos past it; 0 if not there. */
static inline int
sf_literal(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos, const char *word)
{
    Py_ssize_t k = (Py_ssize_t)strlen(word);
    if (n - *pos < k || memcmp(p + *pos, word, k) != 0)
        return 0;
    *pos += k;
    return 1;
}

/* One JSON value at p[*pos]: a string, an integer, true, false or null, as *v (null: kind -1); 0 for anything
 * else (objects and arrays are not read here). */
static int
sf_json_scalar(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos, SfValue *v)
{
    if (*pos >= n)
        return 0;
    unsigned c = p[*pos];
    if (c == '"') {
        v->kind = SF_V_STRING;
        return sf_json_string(p, n, pos, &v->s);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        v->kind = SF_V_NUMBER;
        return sf_json_number(p, n, pos, &v->s);
    }
    v->kind = c == 't' ? SF_V_TRUE : c == 'f' ? SF_V_FALSE : -1;
    return sf_literal(p, n, pos, c == 't' ? "true" : c == 'f' ? "false" : "null");
}

/* A topic (TopicValidator.validateTopic) or group name as the Python decoder accepts it: [%|a-zA-Z0-9_-]+, a
 * topic up to 127 characters (a retry or DLQ topic up to 255), a group up to 120. Escaped: left to Python. */
static int
sf_name_ok(const Span *s, int topic)
{
    if (s->escaped || s->n < 1)
        return 0;
    Py_ssize_t limit = topic ? 127 : 120;
    if (topic && s->n > limit &&
        ((s->n >= 7 && memcmp(s->p, "%RETRY%", 7) == 0) || (s->n >= 5 && memcmp(s->p, "%DLQ%", 5) == 0)))
        limit = 255;
    if (s->n > limit)
        return 0;
    for (Py_ssize_t i = 0; i < s->n; i++) {
        unsigned c = s->p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '%' || c == '|' ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Field `f` of the send header from its wire value, as the Python decoder reads it: ints from digits (a string,
 * or JSON's bare number as the codec's str() gives it), booleans true only for "true" in any case (or JSON's
 * true). 0 for what it leaves to Python: signs, more than 18 digits, out of the field's range, escaped or
 * non-ASCII booleans, a value of another JSON type. */
static int
sf_set_field(SendFrame *out, int f, const SfValue *v)
{
    const Span *s = &v->s;
    switch (f) {
    case SF_PRODUCER_GROUP:
    case SF_TOPIC:
    case SF_DEFAULT_TOPIC:
        if (v->kind != SF_V_STRING || !sf_name_ok(s, f != SF_PRODUCER_GROUP))
            return 0;
        *(f == SF_PRODUCER_GROUP ? &out->producer_group : f == SF_TOPIC ? &out->topic : &out->default_topic) = *s;
        return 1;
    case SF_PROPERTIES:
    case SF_BNAME:
        if (v->kind != SF_V_STRING)
            return 0;
        *(f == SF_PROPERTIES ? &out->properties : &out->bname) = *s;
        return 1;
    case SF_UNIT_MODE:
    case SF_BATCH: {
        int yes;
        if (v->kind == SF_V_TRUE || v->kind == SF_V_FALSE)
            yes = v->kind == SF_V_TRUE;
        else if (v->kind != SF_V_STRING || s->escaped)
            return 0;
        else {
            for (Py_ssize_t i = 0; i < s->n; i++)
                if (s->p[i] >= 0x80) /* str.lower() of other scripts: left to Python */
                    return 0;
            yes = s->n == 4 && (s->p[0] | 0x20) == 't' && (s->p[1] | 0x20) == 'r' && (s->p[2] | 0x20) == 'u' &&
                  (s->p[3] | 0x20) == 'e';
        }
        *(f == SF_UNIT_MODE ? &out->unit_mode : &out->batch) = (char)yes;
        return 1;
    }
    default: {
        long long x;
        if ((v->kind != SF_V_STRING && v->kind != SF_V_NUMBER) || s->escaped || !sf_digits(s->p, s->n, &x))
            return 0;
        if (f == SF_BORN_TIMESTAMP) {
            out->born_timestamp = x;
            return 1;
        }
        if (x > INT32_MAX)
            return 0;
        switch (f) {
        case SF_DEFAULT_TOPIC_QUEUE_NUMS: out->default_topic_queue_nums = (int)x; break;
        case SF_QUEUE_ID: out->queue_id = (int)x; break;
        case SF_SYS_FLAG: out->sys_flag = (int)x; break;
        case SF_FLAG: out->msg_flag = (int)x; break;
        case SF_RECONSUME_TIMES: out->reconsume_times = (int)x; out->has_reconsume_times = 1; break;
        default: out->max_reconsume_times = (int)x; out->has_max_reconsume_times = 1; break;
        }
        return 1;
    }
    }
}

/* The field an extFields key names (V2: a..n; SEND_MESSAGE: the full names), or -1 (ignored, as in Python). */
static int
sf_field(int v2, const unsigned char *k, Py_ssize_t n)
{
    if (v2)
        return n == 1 && k[0] >= 'a' && k[0] < 'a' + SF_N_FIELDS ? k[0] - 'a' : -1;
    for (int f = 0; f < SF_N_FIELDS; f++)
        if (sf_is(&SfFieldNames[f], k, n))
            return f;
    return -1;
}

/* One extFields entry: a known field (once only) is set, any other ignored. */
static inline int
sf_ext_entry(SendFrame *out, unsigned *seen, const Span *key, const SfValue *v)
{
    int f = sf_field(out->code != SF_SEND_MESSAGE, key->p, key->n);
    if (f < 0)
        return 1;
    if (*seen & (1u << f))
        return 0;
    *seen |= 1u << f;
    return sf_set_field(out, f, v);
}

/* The JSON header's extFields object at p[*pos]; the code must be known by then (fastjson and the C++ client
 * write it first). */
static int
sf_json_ext(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos, SendFrame *out, unsigned *seen)
{
    if (*pos >= n || p[*pos] != '{')
        return 0;
    ++*pos;
    sf_ws(p, n, pos);
    if (*pos < n && p[*pos] == '}') {
        ++*pos;
        return 1;
    }
    for (;;) {
        Span key;
        SfValue v;
        if (*pos >= n || p[*pos] != '"' || !sf_json_string(p, n, pos, &key) || key.escaped)
            return 0;
        sf_ws(p, n, pos);
        if (*pos >= n || p[*pos] != ':')
            return 0;
        ++*pos;
        sf_ws(p, n, pos);
        /* null: the codec drops the field, but only after reading all as strings; left to Python */
        if (!sf_json_scalar(p, n, pos, &v) || v.kind < 0 || !sf_ext_entry(out, seen, &key, &v))
            return 0;
        sf_ws(p, n, pos);
        if (*pos < n && p[*pos] == ',') {
            ++*pos;
            sf_ws(p, n, pos);
            continue;
        }
        if (*pos < n && p[*pos] == '}') {
            ++*pos;
            return 1;
        }
        return 0;
    }
}

/* A JSON number within int32 as *x. */
static inline int
sf_json_int32(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos, int *x)
{
    Span s;
    long long v;
    if (!sf_json_number(p, n, pos, &s))
        return 0;
    int neg = s.p[0] == '-';
    if (!sf_digits(s.p + neg, s.n - neg, &v) || v > (neg ? 2147483648LL : INT32_MAX))
        return 0;
    *x = (int)(neg ? -v : v);
    return 1;
}

enum { SF_J_CODE, SF_J_LANGUAGE, SF_J_VERSION, SF_J_OPAQUE, SF_J_FLAG, SF_J_REMARK, SF_J_EXT, SF_J_OTHER };
static const SfName SfJsonKeys[SF_J_OTHER] = {SF_NAME("code"),   SF_NAME("language"), SF_NAME("version"),
                                              SF_NAME("opaque"), SF_NAME("flag"),     SF_NAME("remark"),
                                              SF_NAME("extFields")};

/* The JSON header p[0:n]: a fastjson RemotingCommand object of a send. */
static int
sf_json_header(const unsigned char *p, Py_ssize_t n, SendFrame *out, unsigned *seen)
{
    Py_ssize_t pos = 0;
    unsigned keys = 0;
    out->language = 0; /* absent: JAVA */
    sf_ws(p, n, &pos);
    if (pos >= n || p[pos] != '{')
        return 0;
    pos++;
    sf_ws(p, n, &pos);
    for (;;) {
        Span key;
        SfValue v;
        if (pos >= n || p[pos] != '"' || !sf_json_string(p, n, &pos, &key) || key.escaped)
            return 0;
        sf_ws(p, n, &pos);
        if (pos >= n || p[pos] != ':')
            return 0;
        pos++;
        sf_ws(p, n, &pos);
        int k = 0;
        while (k < SF_J_OTHER && !sf_is(&SfJsonKeys[k], key.p, key.n))
            k++;
        if (k < SF_J_OTHER) {
            if (keys & (1u << k))
                return 0;
            keys |= 1u << k;
        }
        switch (k) {
        case SF_J_CODE:
            if (!sf_json_int32(p, n, &pos, &out->code) || !SF_SEND_CODE(out->code))
                return 0;
            break;
        case SF_J_VERSION:
            if (!sf_json_int32(p, n, &pos, &out->version))
                return 0;
            break;
        case SF_J_OPAQUE:
            if (!sf_json_int32(p, n, &pos, &out->opaque))
                return 0;
            break;
        case SF_J_FLAG:
            if (!sf_json_int32(p, n, &pos, &out->flag))
                return 0;
            break;
        case SF_J_LANGUAGE: /* a name of no LanguageCode, or not a string: left to Python */
            if (pos >= n || p[pos] != '"' || !sf_json_string(p, n, &pos, &v.s) || v.s.escaped)
                return 0;
            out->language = -1;
            for (int i = 0; i < SF_N_LANGUAGES; i++)
                if (sf_is(&SfLanguages[i], v.s.p, v.s.n))
                    out->language = i;
            if (out->language < 0)
                return 0;
            break;
        case SF_J_EXT:
            if (!(keys & (1u << SF_J_CODE)) || !sf_json_ext(p, n, &pos, out, seen))
                return 0;
            break;
        default: /* remark and the rest: read, ignored */
            if (!sf_json_scalar(p, n, &pos, &v))
                return 0;
        }
        sf_ws(p, n, &pos);
        if (pos < n && p[pos] == ',') {
            pos++;
            sf_ws(p, n, &pos);
            continue;
        }
        if (pos < n && p[pos] == '}') {
            pos++;
            break;
        }
        return 0;
    }
    sf_ws(p, n, &pos);
    return pos == n && (keys & (1u << SF_J_EXT));
}

/* The ROCKETMQ header p[0:n]: code int16, language byte, version int16, opaque int32, flag int32, then the remark
 * and the extFields map behind int32 lengths, the map's entries (int16 key length, key, int32 value length,
 * value); every string strict UTF-8. Bytes after the map are ignored, as in Python. */
static int
sf_rocketmq_header(const unsigned char *p, Py_ssize_t n, SendFrame *out, unsigned *seen)
{
    if (n < 21)
        return 0;
    out->code = get16(p);
    if (!SF_SEND_CODE(out->code))
        return 0;
    out->language = p[2] < SF_N_LANGUAGES ? p[2] : SF_LANGUAGE_OTHER;
    out->version = get16(p + 3);
    out->opaque = get32(p + 5);
    out->flag = get32(p + 9);
    Py_ssize_t remark_len = get32(p + 13);
    if (remark_len < 0 || remark_len > n - 21 || !sf_utf8_valid(p + 17, remark_len))
        return 0;
    Py_ssize_t pos = 17 + remark_len, ext_len = get32(p + pos);
    pos += 4;
    if (ext_len <= 0 || ext_len > n - pos)
        return 0;
    for (Py_ssize_t end = pos + ext_len; pos < end;) {
        Span key = {0}, val = {0};
        if (end - pos < 2 || (key.n = get16(p + pos)) < 0 || key.n > end - pos - 2)
            return 0;
        key.p = p + pos + 2;
        pos += 2 + key.n;
        if (end - pos < 4 || (val.n = get32(p + pos)) < 0 || val.n > end - pos - 4)
            return 0;
        val.p = p + pos + 4;
        pos += 4 + val.n;
        SfValue v = {val, SF_V_STRING};
        if (!sf_utf8_valid(key.p, key.n) || !sf_utf8_valid(val.p, val.n) || !sf_ext_entry(out, seen, &key, &v))
            return 0;
    }
    return 1;
}

/* 1: `frame` (len bytes, from its 4-byte total length on, which must be len - 4; the caller has split the frames
 * and bounded their length) is a SEND_MESSAGE, SEND_MESSAGE_V2 or SEND_BATCH_MESSAGE request that the Python
 * decoders take without error, every required field there, with these values, and *out holds them (spans into the
 * frame). 0: anything else; *out is then undefined, and the Python decoders take the frame and give the right
 * answer or error. Never reads outside [frame, frame + len). */
static int
parse_send_frame(const unsigned char *frame, Py_ssize_t len, SendFrame *out)
{
    memset(out, 0, sizeof(*out));
    if (len < 8 || (Py_ssize_t)get32(frame) != len - 4)
        return 0;
    out->serialize = frame[4];
    Py_ssize_t hlen = (Py_ssize_t)((uint32_t)get32(frame + 4) & 0xFFFFFF);
    if (hlen > len - 8)
        return 0;
    unsigned seen = 0;
    const unsigned char *header = frame + 8;
    if (out->serialize == 0 ? !sf_json_header(header, hlen, out, &seen)
        : out->serialize == 1 ? !sf_rocketmq_header(header, hlen, out, &seen)
                              : 1)
        return 0;
    if ((seen & SF_REQUIRED) != SF_REQUIRED)
        return 0;
    out->body = header + hlen;
    out->body_len = len - 8 - hlen;
    return 1;
}

#endif /* GATEWAY_SEND_FRAME_H */
