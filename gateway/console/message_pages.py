"""Messages (by topic and time range, by key, by id), one message (properties, body as text, JSON or hex, which
groups consumed it), a message's trace as a timeline, and a group's dead-letter messages."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from gateway.admin.cli import message_json
from gateway.remoting.message import MessageExt
from gateway.remoting.names import DLQ_GROUP_TOPIC_PREFIX, TRACE_TOPIC
from gateway.trace.view import trace_records

from .routes import Rendered, View, page

# Bounds of one page: messages shown, and messages read from each queue of a time range.
MESSAGES_A_PAGE = 64
READ_A_QUEUE = 32
BODY_SHOWN = 64 * 1024
_HOUR_MS = 3_600_000


def _local(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%dT%H:%M:%S")


def messages_between(view: View, topic: str, begin: int, end: int) -> tuple[list[MessageExt], bool]:
    """Messages of ``topic`` stored in [begin, end], newest first: at most :data:`READ_A_QUEUE` read from each
    queue (from the end of the range back) and :data:`MESSAGES_A_PAGE` kept; True when the range holds more."""
    admin = view.admin
    route = admin.topic_route(topic)
    masters = admin.route_masters(topic, route)
    found: list[MessageExt] = []
    more = False
    for qd in sorted(route.get("queueDatas", []), key=lambda qd: qd["brokerName"]):
        addr = masters.get(qd["brokerName"])
        for queue_id in range(qd["readQueueNums"]) if addr else ():
            with admin.part():
                low, high = admin.queue_offsets(addr, topic, queue_id)
                first = max(low, admin.search_offset(addr, topic, queue_id, begin))
                last = min(high, admin.search_offset(addr, topic, queue_id, end) + 1)
                start = max(first, last - READ_A_QUEUE)
                more = more or start > first
                offset = start
                while offset < last:
                    next_offset, msgs = admin.pull(addr, topic, queue_id, offset)
                    found.extend(m for m in msgs if begin <= m.store_timestamp <= end and m.queue_offset < last)
                    if next_offset <= offset:
                        break
                    offset = next_offset
    found.sort(key=lambda m: m.store_timestamp, reverse=True)
    return found[:MESSAGES_A_PAGE], more or len(found) > MESSAGES_A_PAGE


def _row(m: MessageExt) -> dict[str, Any]:
    return {
        "msgId": m.client_msg_id,
        "offsetMsgId": m.msg_id,
        "tags": m.tags,
        "keys": m.keys,
        "storeTime": _local(m.store_timestamp),
        "where": f"{m.topic} {m.store_host} q{m.queue_id} @{m.queue_offset}",
    }


@page("/messages", nav="Messages")
def messages(view: View) -> Rendered:
    now = _now()
    context: dict[str, Any] = {"title": "Messages", "args": dict(view.args)}
    context["args"].setdefault("begin", _local(now - _HOUR_MS))
    context["args"].setdefault("end", _local(now + 60_000))
    if view.args.get("id"):
        found = [view.message()]
    elif view.args.get("topic") and view.args.get("key"):
        found = view.admin.query_message(view.topic(), view.text("key", max_length=1024))
    elif view.args.get("topic") and view.args.get("msgId"):
        found = view.admin.query_message(view.topic(), view.text("msgId", max_length=64), unique=True)
    elif view.args.get("topic"):
        topic = view.topic()
        found, context["more"] = messages_between(
            view, topic, view.time("begin", now - _HOUR_MS), view.time("end", now + 60_000)
        )
    else:
        return Rendered("messages.html", context)
    context["found"] = [_row(m) for m in found[:MESSAGES_A_PAGE]]
    return Rendered("messages.html", context)


def _now() -> int:
    return int(datetime.now().timestamp() * 1000)


@page("/message")
def message(view: View) -> Rendered:
    shown = view.choice("as", ("text", "json", "hex"))
    m = view.message()
    body, cut = m.body[:BODY_SHOWN], len(m.body) > BODY_SHOWN
    if shown == "hex":
        text = " ".join(body[i : i + 16].hex(" ") for i in range(0, len(body), 16))
    else:
        text = body.decode("utf-8", "replace")
        if shown == "json":
            try:
                text = json.dumps(json.loads(body), indent=2, ensure_ascii=False)
            except ValueError:
                text = "(the body is not JSON)\n" + text
    fields = message_json(m, body=False)
    properties = sorted(fields.pop("properties").items())
    return Rendered(
        "message.html",
        {
            "title": f"Message {m.client_msg_id}",
            "message": fields,
            "properties": properties,
            "body": text,
            "cut": cut,
            "size": len(m.body),
            "as": shown,
            "tracks": _tracks(view, m),
        },
    )


def _tracks(view: View, m: MessageExt) -> list[dict[str, Any]]:
    """Dashboard's message track: each group of the topic, and whether it consumed the message (its offset on
    the message's queue is past it)."""
    admin = view.admin
    addr = m.store_host
    out = []
    with admin.part():
        for group in admin.groups_of_topic(addr, m.topic):
            state = "UNKNOWN"
            with admin.part():
                table = admin.consume_stats(addr, group, m.topic).get("offsetTable", {})
                offsets = [r["consumerOffset"] for mq, r in table.items() if mq["queueId"] == m.queue_id]
                online = bool(admin.consumer_connections(addr, group))
                if offsets and offsets[0] > m.queue_offset:
                    state = "CONSUMED"
                else:
                    state = "NOT_CONSUME_YET" if online else "NOT_ONLINE"
            out.append({"group": group, "trackType": state})
    return out


@page("/trace", nav="Trace")
def trace(view: View) -> Rendered:
    context: dict[str, Any] = {"title": "Message trace", "args": dict(view.args)}
    if view.args.get("topic") and view.args.get("key"):
        # Dashboard's trace query by key: the messages with the key, each linking to its trace.
        found = view.admin.query_message(view.topic(), view.text("key", max_length=1024))
        context["found"] = [_row(m) for m in found[:MESSAGES_A_PAGE]]
        return Rendered("trace.html", context)
    if not view.args.get("id"):
        return Rendered("trace.html", context)
    msg_id = view.text("id", max_length=64).strip()
    trace_topic = view.topic("traceTopic") if view.args.get("traceTopic") else TRACE_TOPIC
    records = trace_records(view.admin.query_message(trace_topic, msg_id), msg_id)
    rows = [
        {
            "type": r.trace_type,
            "group": r.group,
            "clientHost": r.client_host or host,
            "time": _local(r.timestamp or 0),
            "costTime": r.cost_time,
            "status": "success" if r.success or r.trace_type == "SubBefore" else "failed",
            "retryTimes": r.retry_times,
            "start": r.timestamp or 0,
        }
        for r, host in records
    ]
    context |= {"rows": rows, "timeline": _timeline(rows)}
    return Rendered("trace.html", context)


def _timeline(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Bars on a time axis (SVG coordinates): a Pub, then each group's SubBefore/SubAfter, as Dashboard's
    trace graph draws them."""
    if not rows:
        return {"bars": [], "width": 0, "height": 0}
    t0 = min(r["start"] for r in rows)
    t1 = max(r["start"] + (r["costTime"] or 0) for r in rows)
    span = max(t1 - t0, 1)
    width, left = 1100, 260  # labels of the last bars go right of them: 200 px kept free
    bars = []
    for i, r in enumerate(rows):
        x = left + (r["start"] - t0) * (width - left - 200) / span
        w = max((r["costTime"] or 0) * (width - left - 200) / span, 3)
        label = f"{r['type']} {r['group'] or ''}"
        bars.append({"y": 24 + i * 26, "x": round(x, 1), "w": round(w, 1), "label": label, "kind": r["type"]})
        bars[-1]["text"] = f"+{r['start'] - t0} ms, {r['costTime']} ms, {r['status']}"
    return {"bars": bars, "width": width, "height": 40 + len(rows) * 26, "left": left, "span": span}


@page("/dlq", nav="DLQ")
def dlq(view: View) -> Rendered:
    now = _now()
    context: dict[str, Any] = {"title": "DLQ messages", "args": dict(view.args)}
    context["args"].setdefault("begin", _local(now - 24 * _HOUR_MS))
    context["args"].setdefault("end", _local(now + 60_000))
    if not view.args.get("group"):
        return Rendered("dlq.html", context)
    group = view.group()
    topic = DLQ_GROUP_TOPIC_PREFIX + group
    if topic not in view.admin.topic_list():
        context["found"], context["missing"] = [], f"group {group} has no dead-letter topic {topic}"
        return Rendered("dlq.html", context)
    found, context["more"] = messages_between(
        view, topic, view.time("begin", now - 24 * _HOUR_MS), view.time("end", now + 60_000)
    )
    context["group"] = group
    context["found"] = [_row(m) | {"originTopic": m.properties.get("RETRY_TOPIC")} for m in found]
    return Rendered("dlq.html", context)
