"""Messages on the wire and on disk: properties, ids, tag hashes, the store record, batch bodies.

The commitlog record (MessageDecoder's layout) is also what PULL, QUERY and VIEW responses carry,
so one encoder and one decoder serve the store, the broker and the client.
"""

from __future__ import annotations

import socket
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from .codec import accelerator

# Property separators (MessageDecoder.NAME_VALUE_SEPARATOR / PROPERTY_SEPARATOR).
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

_TAGS_SEP = "TAGS" + NAME_VALUE_SEPARATOR
_WAIT_SEP = "WAIT" + NAME_VALUE_SEPARATOR

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7, record layout v1
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194, end-of-segment filler


class MessageConst:
    """Property keys (MessageConst)."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT_STORE_MSG_OK = "WAIT"
    DELAY_TIME_LEVEL = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QUEUE_ID = "REAL_QID"
    TRANSACTION_PREPARED = "TRAN_MSG"
    PRODUCER_GROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
    MSG_REGION = "MSG_REGION"
    TRACE_SWITCH = "TRACE_ON"
    CONSUME_START_TIME = "CONSUME_START_TIME"
    CLUSTER = "CLUSTER"
    TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    # request/reply
    CORRELATION_ID = "CORRELATION_ID"
    MESSAGE_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    MESSAGE_TTL = "TTL"
    MESSAGE_TYPE = "MSG_TYPE"
    PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
    # 5.x timer messages
    TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    TIMER_DELAY_MS = "TIMER_DELAY_MS"
    TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"  # a recall marker: the timer drops the message it names
    TIMER_OUT_MS = "TIMER_OUT_MS"
    TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
    KEY_SEPARATOR = " "


class MessageSysFlag:
    """sysFlag bits of a message."""

    COMPRESSED_FLAG = 0x1
    MULTI_TAGS_FLAG = 0x2
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_COMMIT_TYPE = 0x8
    TRANSACTION_ROLLBACK_TYPE = 0xC
    BORNHOST_V6_FLAG = 0x10
    STOREHOSTADDRESS_V6_FLAG = 0x20
    COMPRESSION_TYPE_MASK = 0x700

    @staticmethod
    def transaction_value(sys_flag: int) -> int:
        return sys_flag & 0xC

    @staticmethod
    def reset_transaction_value(sys_flag: int, tx_type: int) -> int:
        return (sys_flag & ~0xC) | tx_type


def properties_to_string(props: dict[str, str] | None) -> str:
    """``messageProperties2String``: name 0x01 value 0x02 ..., without the trailing 0x02."""
    if not props:
        return ""
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None)


def string_to_properties(s: str | None) -> dict[str, str]:
    """``string2messageProperties``, skipping malformed segments as Java does."""
    if not s:
        return {}
    try:  # the well-formed case, in C
        fast = dict(seg.split(NAME_VALUE_SEPARATOR, 1) for seg in s.split(PROPERTY_SEPARATOR))
        if "" not in fast and "" not in fast.values():
            return fast
    except ValueError:  # a segment without a separator
        pass
    out: dict[str, str] = {}
    for seg in s.split(PROPERTY_SEPARATOR):
        if len(seg) < 3:
            continue
        k, sep, v = seg.partition(NAME_VALUE_SEPARATOR)
        if sep and k and v:
            out[k] = v
    return out


def property_value(properties: str, name_sep: str) -> str | None:
    """The value after ``name_sep`` (a property name plus 0x01) in an encoded properties string, if non-empty.

    A plain ``str.find``: cheaper than decoding every message's properties on the send and index paths.
    """
    i = properties.find(name_sep)
    while i > 0 and properties[i - 1] != "\x02":  # inside another property's name or value
        i = properties.find(name_sep, i + 1)
    if i < 0:
        return None
    start = i + len(name_sep)
    end = properties.find("\x02", start)
    value = properties[start:] if end < 0 else properties[start:end]
    return value or None


def store_properties(properties: str, cluster: str) -> str:
    """What a single send stores: the sent properties without WAIT, plus CLUSTER (as the 4.9.8 broker).

    String surgery instead of Java's map round trip (this is the send hot path); parsing the result gives
    the same map, which a property test checks.
    """
    i = properties.find("WAIT\x01")
    while i >= 0:
        if i == 0 or properties[i - 1] == PROPERTY_SEPARATOR:
            end = properties.find(PROPERTY_SEPARATOR, i)
            properties = properties[:i] + ("" if end < 0 else properties[end + 1 :])
            i = properties.find("WAIT\x01", i)
        else:
            i = properties.find("WAIT\x01", i + 1)
    if "CLUSTER\x01" in properties:  # a client-sent CLUSTER is replaced, as the map would do
        props = string_to_properties(properties)
        props[MessageConst.CLUSTER] = cluster
        return properties_to_string(props)
    sep = PROPERTY_SEPARATOR if properties and not properties.endswith(PROPERTY_SEPARATOR) else ""
    return f"{properties}{sep}{MessageConst.CLUSTER}{NAME_VALUE_SEPARATOR}{cluster}"


def send_properties(properties: str, cluster: str) -> tuple[str, int, bool]:
    """A single send's stored properties (:func:`store_properties`), its tags code (``tags_code`` of TAGS) and
    whether it waits to be stored (:func:`wait_store_msg_ok`), in one pass by the C codec where it is built;
    Python takes what C leaves to it (non-ASCII text, a client-sent CLUSTER)."""
    if _c_send_properties is not None:
        done = _c_send_properties(properties, cluster)
        if done is not NotImplemented:
            return done  # type: ignore[no-any-return]
    return (
        store_properties(properties, cluster),
        tags_code(property_value(properties, _TAGS_SEP)),
        wait_store_msg_ok(properties),
    )


def wait_store_msg_ok(properties: str | None) -> bool:
    """Message.isWaitStoreMsgOK: unless its WAIT property says otherwise (Boolean.parseBoolean)."""
    if not properties or _WAIT_SEP not in properties:
        return True
    value = property_value(properties, _WAIT_SEP)
    return value is None or value.lower() == "true"


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode`` (UTF-16 code units, int32 overflow)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


@lru_cache(maxsize=4096)
def _tag_hash(tag: str) -> int:
    return java_string_hash(tag)


def tags_code(tags: str | None) -> int:
    """Consume-queue tag hash (0 when the message has no tag); a topic's few tags are hashed once."""
    return _tag_hash(tags) if tags else 0


_ADDR_V4 = struct.Struct(">4si")
_OFFSET = struct.Struct(">q")


def pack_host(host: str, port: int) -> bytes:
    """An address as the record stores it: IP bytes (4 or 16) then an int32 port."""
    try:
        ip = socket.inet_pton(socket.AF_INET, host)
    except OSError:
        ip = socket.inet_pton(socket.AF_INET6, host)
    return ip + port.to_bytes(4, "big", signed=True)


def unpack_host(data: bytes) -> str:
    """``ip:port`` from packed host bytes."""
    ip = data[:-4]
    port = int.from_bytes(data[-4:], "big", signed=True)
    fam = socket.AF_INET if len(ip) == 4 else socket.AF_INET6
    return f"{socket.inet_ntop(fam, ip)}:{port}"


def create_offset_message_id(store_host: bytes, physical_offset: int) -> str:
    """offsetMsgId: store host, port, commitlog offset; uppercase hex."""
    return (store_host + _OFFSET.pack(physical_offset)).hex().upper()


def decode_offset_message_id(msg_id: str) -> tuple[str, int]:
    """(``ip:port``, commitlog offset) from an offsetMsgId; raises ValueError if malformed."""
    try:
        raw = bytes.fromhex(msg_id)
        if len(raw) not in (16, 28):
            raise ValueError
    except ValueError:
        raise ValueError(f"not an offset message id: {msg_id}") from None
    return unpack_host(raw[:-8]), _OFFSET.unpack(raw[-8:])[0]


# Fixed part of a record up to the born host: totalSize, magic, bodyCRC, queueId, flag,
# queueOffset, physicalOffset, sysFlag, bornTimestamp.
_HEAD = struct.Struct(">iiiiiqqiq")
_HEAD_SIZE = _HEAD.size  # 44
_SYSFLAG_POS = 36
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_IQ = struct.Struct(">iq")
_H = struct.Struct(">h")
_B = struct.Struct(">b")
_II = struct.Struct(">ii")


def body_crc(body: bytes | memoryview, crc32: Callable[[bytes | memoryview], int] = zlib.crc32) -> int:
    """Stored body CRC: CRC32 with the sign bit cleared (``crc32``: zlib's, or the store's C one)."""
    return crc32(body) & 0x7FFFFFFF


def record_size(body_len: int, topic_len: int, props_len: int, born_host_len: int = 8, store_host_len: int = 8) -> int:
    """Length of a v1 record (``calMsgLength``)."""
    return (
        4
        + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + born_host_len
        + 8
        + store_host_len
        + 4
        + 8
        + 4
        + body_len
        + 1
        + topic_len
        + 2
        + props_len
    )


def encode_record(
    *,
    topic: bytes,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes,
    properties: bytes,
    crc: int | None = None,
) -> bytes:
    """One v1 record; hosts are :func:`pack_host` bytes, topic and properties already UTF-8."""
    total = record_size(len(body), len(topic), len(properties), len(born_host), len(store_host))
    return b"".join(
        (
            _HEAD.pack(
                total,
                MESSAGE_MAGIC_CODE,
                body_crc(body) if crc is None else crc,
                queue_id,
                flag,
                queue_offset,
                physical_offset,
                sys_flag,
                born_timestamp,
            ),
            born_host,
            _Q.pack(store_timestamp),
            store_host,
            _IQ.pack(reconsume_times, prepared_transaction_offset),
            _I.pack(len(body)),
            body,
            _B.pack(len(topic)),
            topic,
            _H.pack(len(properties)),
            properties,
        )
    )


@dataclass(slots=True)
class Message:
    """A message as a producer builds it."""

    topic: str
    body: bytes
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(MessageConst.KEYS)


@dataclass(slots=True)
class MessageExt:
    """A stored message as records carry it (MessageExt)."""

    topic: str
    body: bytes
    flag: int
    properties: dict[str, str]
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body_crc: int
    store_size: int
    msg_id: str  # offsetMsgId

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(MessageConst.KEYS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    @property
    def client_msg_id(self) -> str:
        """The id users see: UNIQ_KEY, else the offsetMsgId."""
        return self.uniq_key or self.msg_id


class RecordError(ValueError):
    """A record that does not parse (bad magic, size, or truncated)."""


def decode_record(buf: bytes | memoryview, pos: int = 0, *, decompress: bool = False) -> MessageExt:
    """Decode the record at ``pos``; ``decompress`` inflates a compressed body as clients do."""
    try:
        total, magic, crc, queue_id, flag, queue_offset, phy, sys_flag, born_ts = _HEAD.unpack_from(buf, pos)
        if magic != MESSAGE_MAGIC_CODE:
            raise RecordError(f"bad magic code {magic:#x} at {pos}")
        if total < _HEAD_SIZE or pos + total > len(buf):
            raise RecordError(f"bad record size {total} at {pos}")
        p = pos + _HEAD_SIZE
        blen = 20 if sys_flag & MessageSysFlag.BORNHOST_V6_FLAG else 8
        born_host = bytes(buf[p : p + blen])
        p += blen
        (store_ts,) = _Q.unpack_from(buf, p)
        p += 8
        slen = 20 if sys_flag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG else 8
        store_host = bytes(buf[p : p + slen])
        p += slen
        reconsume, prepared = _IQ.unpack_from(buf, p)
        p += 12
        (body_len,) = _I.unpack_from(buf, p)
        p += 4
        if body_len < 0 or p + body_len > pos + total:
            raise RecordError(f"bad body length {body_len} at {pos}")
        body = bytes(buf[p : p + body_len])
        p += body_len
        (topic_len,) = _B.unpack_from(buf, p)
        p += 1
        topic_len &= 0xFF
        topic = bytes(buf[p : p + topic_len]).decode()
        p += topic_len
        (props_len,) = _H.unpack_from(buf, p)
        p += 2
        props = bytes(buf[p : p + props_len]).decode() if props_len > 0 else ""
        p += max(props_len, 0)
        if p != pos + total:
            raise RecordError(f"record size {total} does not match its fields at {pos}")
    except struct.error as e:
        raise RecordError(f"truncated record at {pos}: {e}") from None
    except UnicodeDecodeError as e:
        raise RecordError(f"bad UTF-8 in record at {pos}: {e}") from None
    if decompress and sys_flag & MessageSysFlag.COMPRESSED_FLAG:
        body = zlib.decompress(body)
    return MessageExt(
        topic=topic,
        body=body,
        flag=flag,
        properties=string_to_properties(props),
        queue_id=queue_id,
        queue_offset=queue_offset,
        commitlog_offset=phy,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=unpack_host(born_host),
        store_timestamp=store_ts,
        store_host=unpack_host(store_host),
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body_crc=crc,
        store_size=total,
        msg_id=create_offset_message_id(store_host, phy),
    )


def decode_properties(record: bytes | memoryview) -> dict[str, str]:
    """The properties of one whole record, skipping everything else (``MessageDecoder.decodeProperties``)."""
    try:
        (sys_flag,) = _I.unpack_from(record, _SYSFLAG_POS)
        p = _HEAD_SIZE + (20 if sys_flag & MessageSysFlag.BORNHOST_V6_FLAG else 8) + 8
        p += (20 if sys_flag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG else 8) + 12
        (body_len,) = _I.unpack_from(record, p)
        p += 4 + body_len
        p += 1 + (record[p] & 0xFF)
        (props_len,) = _H.unpack_from(record, p)
        return string_to_properties(bytes(record[p + 2 : p + 2 + props_len]).decode()) if props_len > 0 else {}
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise RecordError(f"bad record: {e}") from None


def decode_records(buf: bytes | memoryview, *, decompress: bool = True) -> list[MessageExt]:
    """All records in a PULL/QUERY body (``MessageDecoder.decodes``)."""
    out = []
    pos = 0
    n = len(buf)
    while pos < n:
        m = decode_record(buf, pos, decompress=decompress)
        out.append(m)
        pos += m.store_size
    return out


# Batch body entry: totalSize, magic, bodyCRC, flag, bodyLen.
_BATCH_HEAD = struct.Struct(">iiiii")


def decode_batch(body: bytes) -> list[tuple[int, bytes, str]]:
    """(flag, body, properties) of each message in a SEND_BATCH_MESSAGE body."""
    out = []
    pos = 0
    n = len(body)
    try:
        while pos < n:
            total, _magic, _crc, flag, blen = _BATCH_HEAD.unpack_from(body, pos)
            p = pos + _BATCH_HEAD.size
            if blen < 0 or p + blen > n:
                raise RecordError("bad batch body length")
            mbody = body[p : p + blen]
            p += blen
            (plen,) = _H.unpack_from(body, p)
            p += 2
            if plen < 0 or p + plen > n:
                raise RecordError("bad batch properties length")
            props = body[p : p + plen].decode()
            p += plen
            if total != p - pos:
                raise RecordError("batch entry size does not match its fields")
            out.append((flag, mbody, props))
            pos = p
    except struct.error as e:
        raise RecordError(f"truncated batch body: {e}") from None
    except UnicodeDecodeError as e:
        raise RecordError(f"bad UTF-8 in batch body: {e}") from None
    return out


def encode_batch(messages: list[tuple[int, bytes, str]]) -> bytes:
    """The SEND_BATCH_MESSAGE body for (flag, body, properties) entries (MessageDecoder.encodeMessages)."""
    parts = []
    for flag, body, props in messages:
        pb = props.encode()
        total = _BATCH_HEAD.size + len(body) + 2 + len(pb)
        parts.append(_BATCH_HEAD.pack(total, 0, 0, flag, len(body)))
        parts.append(body)
        parts.append(_H.pack(len(pb)))
        parts.append(pb)
    return b"".join(parts)


_c_codec = accelerator()
_c_send_properties = _c_codec.send_properties if _c_codec is not None else None
