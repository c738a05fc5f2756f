"""Trace messages (bodies of RMQ_SYS_TRACE_TOPIC) into typed trace records, without Spark.

Each record becomes one row of :data:`TRACE_COLUMNS`; a record that does not parse becomes an error naming
the trace message it came from, and the rest of the message is still read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gateway.trace.codec import TraceFormatError, TraceRecord, decode_body

# (column, Spark type) of a parsed record; ``traceMsgId`` is the trace message that carried it.
TRACE_COLUMNS = (
    ("traceType", "string"),
    ("timestampMs", "bigint"),
    ("regionId", "string"),
    ("groupName", "string"),
    ("topic", "string"),
    ("msgId", "string"),
    ("tags", "string"),
    ("keys", "string"),
    ("storeHost", "string"),
    ("bodyLength", "int"),
    ("costTime", "int"),
    ("msgType", "int"),
    ("offsetMsgId", "string"),
    ("success", "boolean"),
    ("clientHost", "string"),
    ("requestId", "string"),
    ("retryTimes", "int"),
    ("contextCode", "int"),
    ("transactionId", "string"),
    ("transactionState", "string"),
    ("fromTransactionCheck", "boolean"),
    ("traceMsgId", "string"),
    ("error", "string"),
)
TRACE_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in TRACE_COLUMNS)
# What identifies a record, whichever trace message carried it: a trace message the dispatcher's producer sent
# again (a retried send that had been stored), or a record in two trace messages, is one record. A consume
# call's request id names its SubBefore/SubAfter; a send's Pub is its msgId, group, time and stored offset id.
RECORD_ID = (
    "traceType", "msgId", "groupName", "requestId", "timestampMs", "offsetMsgId", "transactionState",
    "fromTransactionCheck",
)  # fmt: skip
_FIELDS = [
    "trace_type", "timestamp", "region_id", "group", "topic", "msg_id", "tags", "keys", "store_host",
    "body_length", "cost_time", "msg_type", "offset_msg_id", "success", "client_host", "request_id",
    "retry_times", "context_code", "transaction_id", "transaction_state", "from_transaction_check",
]  # fmt: skip


@dataclass(slots=True)
class ParseError:
    """A record of trace message ``trace_msg_id`` that could not be read."""

    trace_msg_id: str
    error: str


def parse_trace_message(trace_msg_id: str, body: bytes) -> Iterator[TraceRecord | ParseError]:
    """The records of one trace message, and a ParseError for each that does not parse."""
    for item in decode_body(body):
        if isinstance(item, TraceFormatError):
            yield ParseError(trace_msg_id, str(item))
        else:
            yield item


def rows(messages: Iterable[tuple[str, bytes]]) -> Iterator[tuple[Any, ...]]:
    """Rows of TRACE_COLUMNS for ``(traceMsgId, body)`` pairs: a record, or an error row (only
    ``traceMsgId`` and ``error`` set)."""
    empty = (None,) * len(_FIELDS)
    for trace_msg_id, body in messages:
        for item in parse_trace_message(trace_msg_id, body):
            if isinstance(item, ParseError):
                yield (*empty, trace_msg_id, item.error)
            else:
                yield (*(getattr(item, f) for f in _FIELDS), trace_msg_id, None)


def arrow_mapper(batches: Iterable[Any]) -> Iterator[Any]:
    """``DataFrame.mapInArrow`` body: batches with ``msgId`` and ``body`` in, TRACE_COLUMNS out."""
    import pyarrow as pa

    schema = pa.schema(
        [
            (name, {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(), "boolean": pa.bool_()}[kind])
            for name, kind in TRACE_COLUMNS
        ]
    )
    for batch in batches:
        ids = batch.column("msgId").to_pylist()
        bodies = batch.column("body").to_pylist()
        out = list(rows(zip(ids, bodies, strict=True)))
        columns = list(zip(*out, strict=True)) if out else [[] for _ in TRACE_COLUMNS]
        yield pa.RecordBatch.from_arrays(
            [pa.array(list(col), type=field.type) for col, field in zip(columns, schema, strict=True)], schema=schema
        )
