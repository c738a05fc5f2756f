"""Trace records as RocketMQ's clients write them (TraceDataEncoder), and back.

A trace message's body is a run of records, each ending with 0x02 (FIELD_SPLITOR), fields separated by
0x01 (CONTENT_SPLITOR); its KEYS property is every traced msgId and every business key of the records.
Nulls print as ``null``, booleans as ``true``/``false``. Pure: no I/O.

Fields after the type:

* Pub: timestamp, regionId, group, topic, msgId, tags, keys, storeHost, bodyLength, costTime, msgType,
  offsetMsgId, success[, clientHost]
* SubBefore: timestamp, regionId, group, requestId, msgId, retryTimes, keys
* SubAfter: requestId, msgId, costTime, success, keys, contextCode[, timestamp, group]
* EndTransaction: timestamp, regionId, group, topic, msgId, tags, keys, storeHost, msgType, transactionId,
  transactionState, fromTransactionCheck
* Recall (5.x clients, RECALL_MESSAGE): timestamp, regionId, group, topic, msgId, success

A SubAfter of the CLOUD access channel stops after contextCode and a 0x01: a 4.x client writes no 0x02 after
it (the next record follows in the same field run), a 5.x client writes the 0x02.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
DEFAULT_REGION = "DefaultRegion"


class TraceType(enum.Enum):
    Pub = "Pub"
    SubBefore = "SubBefore"
    SubAfter = "SubAfter"
    EndTransaction = "EndTransaction"


class MessageType(enum.IntEnum):
    """The msgType field (MessageType ordinal)."""

    Normal_Msg = 0
    Trans_Msg_Half = 1
    Trans_msg_Commit = 2
    Delay_Msg = 3


class ConsumeReturnType(enum.IntEnum):
    """SubAfter's contextCode (ConsumeReturnType ordinal)."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


@dataclass(slots=True)
class TraceBean:
    """One traced message within a context."""

    topic: str | None = None
    msg_id: str | None = None
    offset_msg_id: str | None = None
    tags: str | None = None
    keys: str | None = None
    store_host: str | None = None
    body_length: int = 0
    msg_type: MessageType = MessageType.Normal_Msg
    retry_times: int = 0
    transaction_id: str | None = None
    transaction_state: str | None = None
    from_transaction_check: bool = False


@dataclass(slots=True)
class TraceContext:
    """One hook call: a send (one bean), a consume call (a bean per message) or an end of transaction."""

    trace_type: TraceType
    timestamp: int
    group: str
    region_id: str | None = DEFAULT_REGION
    request_id: str | None = None
    cost_time: int = 0
    success: bool = True
    context_code: int = 0
    beans: list[TraceBean] = field(default_factory=list)


def _s(value: object) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


def encode_context(ctx: TraceContext) -> tuple[str, set[str]]:
    """The records of ``ctx`` (TraceDataEncoder.encoderFromContextBean) and the keys they add to the trace
    message: each bean's msgId and each of its space-separated keys."""
    out: list[str] = []
    t = ctx.trace_type
    if t is TraceType.Pub:  # a send: its first (only) bean, as Java
        b = ctx.beans[0]
        out.append(
            _join(
                t.value, ctx.timestamp, ctx.region_id, ctx.group, b.topic, b.msg_id, b.tags, b.keys, b.store_host,
                b.body_length, ctx.cost_time, int(b.msg_type), b.offset_msg_id, ctx.success,
            )
        )  # fmt: skip
    elif t is TraceType.SubBefore:
        for b in ctx.beans:
            out.append(
                _join(t.value, ctx.timestamp, ctx.region_id, ctx.group, ctx.request_id, b.msg_id, b.retry_times, b.keys)
            )
    elif t is TraceType.SubAfter:
        for b in ctx.beans:
            out.append(
                _join(
                    t.value, ctx.request_id, b.msg_id, ctx.cost_time, ctx.success, b.keys, ctx.context_code,
                    ctx.timestamp, ctx.group,
                )
            )  # fmt: skip
    else:
        b = ctx.beans[0]
        out.append(
            _join(
                t.value, ctx.timestamp, ctx.region_id, ctx.group, b.topic, b.msg_id, b.tags, b.keys, b.store_host,
                int(b.msg_type), b.transaction_id, b.transaction_state, b.from_transaction_check,
            )
        )  # fmt: skip
    keys: set[str] = set()
    for b in ctx.beans:
        if b.msg_id:
            keys.add(b.msg_id)
        if b.keys:
            keys.update(k for k in b.keys.split(" ") if k)
    return "".join(out), keys


def _join(*fields: object) -> str:
    return CONTENT_SPLITOR.join(map(_s, fields)) + FIELD_SPLITOR


@dataclass(slots=True)
class TraceRecord:
    """One decoded record; fields its type does not carry are None."""

    trace_type: str
    timestamp: int | None = None
    region_id: str | None = None
    group: str | None = None
    topic: str | None = None
    msg_id: str | None = None
    tags: str | None = None
    keys: str | None = None
    store_host: str | None = None
    body_length: int | None = None
    cost_time: int | None = None
    msg_type: int | None = None
    offset_msg_id: str | None = None
    success: bool | None = None
    client_host: str | None = None
    request_id: str | None = None
    retry_times: int | None = None
    context_code: int | None = None
    transaction_id: str | None = None
    transaction_state: str | None = None
    from_transaction_check: bool | None = None


class TraceFormatError(ValueError):
    """A record that is not one of the known types with its field count, or a field that is not a number."""


def _null(v: str) -> str | None:
    return None if v == "null" else v


def _int(v: str) -> int | None:
    return None if v == "null" else int(v)


def _bool(v: str) -> bool:
    if v not in ("true", "false"):
        raise ValueError(f"not a boolean: {v!r}")
    return v == "true"


def decode_record(text: str) -> TraceRecord:
    """One record without its 0x02 (TraceDataEncoder.decoderFromTraceDataString, one entry)."""
    return _decode_fields(text.split(CONTENT_SPLITOR))


def _decode_fields(f: list[str]) -> TraceRecord:
    kind, n = f[0], len(f)
    try:
        if kind == "Pub" and n >= 13:  # 13: before offsetMsgId; 14: 4.x; 15: with the client's host
            return TraceRecord(
                "Pub", _int(f[1]), _null(f[2]), _null(f[3]), _null(f[4]), _null(f[5]), _null(f[6]), _null(f[7]),
                _null(f[8]), _int(f[9]), _int(f[10]), _int(f[11]),
                offset_msg_id=_null(f[12]) if n >= 14 else None,
                success=_bool(f[13]) if n >= 14 else True,
                client_host=_null(f[14]) if n >= 15 else None,
            )  # fmt: skip
        if kind == "SubBefore" and n == 8:
            return TraceRecord(
                "SubBefore", _int(f[1]), _null(f[2]), _null(f[3]), msg_id=_null(f[5]), request_id=_null(f[4]),
                retry_times=_int(f[6]), keys=_null(f[7]),
            )  # fmt: skip
        if kind == "SubAfter" and (n in (7, 9) or (n == 8 and not f[7])):  # 7 or 8: CLOUD, no timestamp and group
            return TraceRecord(
                "SubAfter", _int(f[7]) if n == 9 else None, group=_null(f[8]) if n == 9 else None,
                request_id=_null(f[1]), msg_id=_null(f[2]), cost_time=_int(f[3]), success=_bool(f[4]),
                keys=_null(f[5]), context_code=_int(f[6]),
            )  # fmt: skip
        if kind == "EndTransaction" and n == 13:
            return TraceRecord(
                "EndTransaction", _int(f[1]), _null(f[2]), _null(f[3]), _null(f[4]), _null(f[5]), _null(f[6]),
                _null(f[7]), _null(f[8]), msg_type=_int(f[9]), transaction_id=_null(f[10]),
                transaction_state=_null(f[11]), from_transaction_check=_bool(f[12]),
            )  # fmt: skip
        if kind == "Recall" and n == 7:
            return TraceRecord(
                "Recall", _int(f[1]), _null(f[2]), _null(f[3]), _null(f[4]), _null(f[5]), success=_bool(f[6])
            )
    except ValueError as e:
        raise TraceFormatError(f"{kind} record: {e}") from None
    raise TraceFormatError(f"unknown record: type {kind[:40]!r} with {n} fields")


_TYPES = frozenset(t.value for t in TraceType) | {"Recall"}


def _field_runs(part: str) -> Iterator[list[str]]:
    """The records' fields in one 0x02-separated part: one record, or several where 4.x CLOUD SubAfters (no 0x02
    after them) run into the next record."""
    f = part.split(CONTENT_SPLITOR)
    while f[0] == "SubAfter" and len(f) > 8 and f[7] in _TYPES:
        yield f[:7]
        f = f[7:]
    yield f


def decode_body(body: bytes) -> Iterator[TraceRecord | TraceFormatError]:
    """Every record of a trace message body; a malformed one yields its TraceFormatError (saying which record of
    the body it is, counting from 1) and the rest go on."""
    text = body.decode("utf-8", "replace")
    index = 0
    for part in text.split(FIELD_SPLITOR):
        if not part.strip():
            continue  # after the last 0x02
        for fields in _field_runs(part.lstrip("\r\n")):
            index += 1
            try:
                yield _decode_fields(fields)
            except TraceFormatError as e:
                yield TraceFormatError(f"record {index}: {e}")
