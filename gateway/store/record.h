/* The v1 commitlog record (MESSAGE_MAGIC_CODE), as commit_log.py's encode_record lays it out: written by the store's
 * write_record (_store.c) and by the broker's send lane (gateway/broker/_send_lane.c) straight into a mapping. */
#ifndef GATEWAY_STORE_RECORD_H
#define GATEWAY_STORE_RECORD_H

#include "../_native.h"

#define MESSAGE_MAGIC_CODE ((int32_t)0xDAA320A7)
#define BLANK_MAGIC_CODE ((int32_t)0xCBD43194)

typedef struct {
    int32_t magic, body_crc, queue_id, flag, sys_flag, reconsume_times;
    int64_t queue_offset, phy, born_timestamp, store_timestamp, prepared_offset;
    const void *born_host, *store_host, *body, *topic, *props;
    Py_ssize_t born_len, store_len, body_len, topic_len, props_len;
} Record;

/* calMsgLength: the record's size in bytes. */
static inline long long
record_length(const Record *r)
{
    return 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + (long long)r->born_len + 8 + (long long)r->store_len + 4 + 8 + 4 +
           (long long)r->body_len + 1 + (long long)r->topic_len + 2 + (long long)r->props_len;
}

/* Write `r` (record_length(r) == total bytes, topic_len <= 127, props_len <= 32767: the caller checked) at p. */
static inline void
put_record(unsigned char *p, long long total, const Record *r)
{
    put32(p, total);
    put32(p + 4, r->magic);
    put32(p + 8, r->body_crc);
    put32(p + 12, r->queue_id);
    put32(p + 16, r->flag);
    put64(p + 20, r->queue_offset);
    put64(p + 28, r->phy);
    put32(p + 36, r->sys_flag);
    put64(p + 40, r->born_timestamp);
    p += 48;
    memcpy(p, r->born_host, r->born_len);
    p += r->born_len;
    put64(p, r->store_timestamp);
    memcpy(p + 8, r->store_host, r->store_len);
    p += 8 + r->store_len;
    put32(p, r->reconsume_times);
    put64(p + 4, r->prepared_offset);
    put32(p + 12, r->body_len);
    memcpy(p + 16, r->body, r->body_len);
    p += 16 + r->body_len;
    p[0] = (unsigned char)r->topic_len;
    memcpy(p + 1, r->topic, r->topic_len);
    p += 1 + r->topic_len;
    p[0] = (unsigned char)(r->props_len >> 8);
    p[1] = (unsigned char)r->props_len;
    memcpy(p + 2, r->props, r->props_len);
}

#endif
