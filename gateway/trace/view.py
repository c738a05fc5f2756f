"""What ``mqadmin queryMsgTraceById`` shows of a message's trace (MessageTraceView and the tool's table).

The tool finds the trace messages whose KEYS hold the msgId (a key query on the trace topic), decodes their
records, keeps the Pub and SubAfter records of that msgId, and prints them: producers first, then
consumers, times in the local zone, ClientHost being the host that sent the trace message.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.remoting.message import MessageExt

from .codec import TraceFormatError, TraceRecord, decode_body

_ROW = "%-10s %-20s %-20s %-20s %-10s %-10s\n"


@dataclass(slots=True)
class TraceView:
    """One row: a Pub or a consume (SubAfter) of the message."""

    trace_type: str
    group: str
    client_host: str
    timestamp: int
    cost_time: int
    success: bool


def trace_views(trace_messages: Iterable[MessageExt], msg_id: str) -> list[TraceView]:
    """The Pub and SubAfter records of ``msg_id`` in ``trace_messages`` (MessageTraceView.decodeFromTraceTransData)."""
    views = []
    for m in trace_messages:
        keys = (m.keys or "").split(" ")
        if msg_id not in keys:
            continue
        host = m.born_host.rsplit(":", 1)[0]
        for r in decode_body(m.body):
            if isinstance(r, TraceFormatError) or r.msg_id != msg_id:
                continue
            if r.trace_type in ("Pub", "SubAfter"):
                views.append(_view(r, host))
    return views


def trace_records(trace_messages: Iterable[MessageExt], msg_id: str) -> list[tuple[TraceRecord, str]]:
    """Every record of ``msg_id`` (Pub, SubBefore, SubAfter, EndTransaction) with the host that wrote it,
    in time order: what a timeline of the message draws."""
    found = []
    for m in trace_messages:
        if msg_id not in (m.keys or "").split(" "):
            continue
        host = m.born_host.rsplit(":", 1)[0]
        records = decode_body(m.body)
        found.extend((r, host) for r in records if not isinstance(r, TraceFormatError) and r.msg_id == msg_id)
    return sorted(found, key=lambda item: item[0].timestamp or 0)


def _view(r: TraceRecord, host: str) -> TraceView:
    return TraceView(r.trace_type, r.group or "", host, r.timestamp or 0, r.cost_time or 0, bool(r.success))


def format_trace_views(views: list[TraceView]) -> str:
    """The tool's table: a producer block and a consumer block, each followed by a blank line."""
    out = []
    pubs = [v for v in views if v.trace_type == "Pub"]
    subs = [v for v in views if v.trace_type == "SubAfter"]
    if pubs:
        out.append(_ROW % ("#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes", "#Status"))
        out.extend(_row("Pub", v) for v in pubs)
    out.append("\n")
    if subs:
        out.append(_ROW % ("#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime", "#CostTimes", "#Status"))
        for group in dict.fromkeys(v.group for v in subs):
            out.extend(_row("Sub", v) for v in sorted(subs, key=lambda v: v.timestamp) if v.group == group)
    out.append("\n")
    return "".join(out)


def _row(kind: str, v: TraceView) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v.timestamp / 1000))
    return _ROW % (kind, v.group, v.client_host, when, f"{v.cost_time}ms", "success" if v.success else "failed")
