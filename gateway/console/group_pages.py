"""Consumer groups: every subscription group with its clients and lag, and one group's progress per queue,
clients (language, version), subscriptions and config."""

from __future__ import annotations

import argparse
from typing import Any

from gateway.admin.cli import Table, consumer_progress
from gateway.remoting.bodies import ConsumeType
from gateway.remoting.names import is_system_group

from .routes import BadRequest, Rendered, View, page

# A page of groups asks every master for each group's figures: at most this many groups a page.
GROUPS_A_PAGE = 100


@page("/groups", nav="Consumers")
def groups(view: View) -> Rendered:
    kind = view.choice("kind", ("normal", "system"))
    needle = view.text("filter", default="", max_length=255)
    admin = view.admin
    masters = admin.master_addrs()
    configs: dict[str, dict[str, Any]] = {}
    for addr in masters.values():
        with admin.part():
            for name, config in admin.subscription_groups(addr).items():
                configs.setdefault(name, config)
    names = sorted(n for n in configs if (kind == "system") == is_system_group(n) and needle in n)
    shown = names[:GROUPS_A_PAGE]
    rows = [_summary(view, name, masters) for name in shown]
    return Rendered(
        "groups.html",
        {"title": "Consumers", "groups": rows, "kind": kind, "filter": needle, "more": len(names) - len(shown)},
    )


def _summary(view: View, group: str, masters: dict[str, str]) -> dict[str, Any]:
    admin = view.admin
    row: dict[str, Any] = {"group": group, "clients": 0, "consumeType": None, "messageModel": None, "version": None}
    row |= {"consumeTps": 0.0, "lag": 0}
    popping = False
    for addr in masters.values():
        with admin.part():
            stats = admin.consume_stats(addr, group)
            rows = stats.get("offsetTable", {}).values()
            row["consumeTps"] += stats.get("consumeTps", 0)
            row["lag"] += sum(r["brokerOffset"] - r["consumerOffset"] for r in rows)
            popping = popping or any(r.get("popInflight") for r in rows)
        with admin.part():
            conn = admin.consumer_connections(addr, group)
            if conn:
                clients = conn.get("connectionSet", [])
                row["clients"] = max(row["clients"], len(clients))
                row["consumeType"] = _shown(conn.get("consumeType"))
                row["messageModel"] = conn.get("messageModel")
                row["version"] = min((c["version"] for c in clients), default=None)
    # A group none of whose consumers is online, with pops in flight (our brokers' popInflight), is a POP group.
    if row["consumeType"] is None and popping:
        row["consumeType"] = "POP"
    row["consumeTps"] = round(row["consumeTps"], 2)
    return row


def _subscription(topic: str, sub: dict[str, Any]) -> dict[str, Any]:
    """A SubscriptionData as the pages show it."""
    return {"topic": topic, "expressionType": sub.get("expressionType", "TAG"), "subString": sub.get("subString")}


def _shown(consume_type: str | None) -> str | None:
    """CONSUME_PASSIVELY as PUSH, and so on (the connection list gives the enum's name)."""
    try:
        return ConsumeType[consume_type].shown if consume_type else None
    except KeyError:
        return consume_type


@page("/group")
def group(view: View) -> Rendered:
    name = view.group()
    admin = view.admin
    # A group that never consumed has no %RETRY% route: its progress is empty, the rest of the page still shows.
    progress = Table([], [], {"Diff Total": 0, "Inflight Total": 0})
    with admin.part():
        progress = consumer_progress(admin, argparse.Namespace(groupName=name, topicName=None, showClientIP=True))
    masters = admin.master_addrs()
    clients: dict[str, dict[str, Any]] = {}
    subscriptions: dict[str, dict[str, Any]] = {}
    about: dict[str, Any] = {}
    config: dict[str, Any] = {}
    for addr in masters.values():
        with admin.part():
            conn = admin.consumer_connections(addr, name)
            for c in conn.get("connectionSet", []):
                clients[c["clientId"]] = {k: c[k] for k in ("clientId", "clientAddr", "language", "version")}
            for topic, sub in conn.get("subscriptionTable", {}).items():
                subscriptions[topic] = {
                    "topic": topic,
                    "subString": sub.get("subString"),
                    "expressionType": sub.get("expressionType", "TAG"),
                }
            for key in ("consumeType", "messageModel", "consumeFromWhere"):
                if conn.get(key):
                    about[key] = _shown(conn[key]) if key == "consumeType" else conn[key]
        with admin.part():
            found = admin.subscription_groups(addr).get(name)
            if found and not config:
                config = dict(sorted(found.items()))
    tps = 0.0
    for addr in masters.values():
        with admin.part():
            tps += admin.consume_stats(addr, name).get("consumeTps", 0)
    return Rendered(
        "group.html",
        {
            "title": f"Consumer group {name}",
            "group": {"groupName": name, **about, "consumeTps": round(tps, 2)},
            "progress": progress,
            "clients": sorted(clients.values(), key=lambda c: c["clientId"]),
            "subscriptions": sorted(subscriptions.values(), key=lambda s: s["topic"]),
            "config": config,
        },
    )


@page("/client")
def client(view: View) -> Rendered:
    """One consumer's running info (Dashboard's client detail, mqadmin consumerStatus), from a broker it is
    connected to."""
    group, client_id = view.group(), view.text("clientId", max_length=255)
    admin = view.admin
    for addr in admin.master_addrs().values():
        with admin.part():
            clients = admin.consumer_connections(addr, group).get("connectionSet", [])
            if any(c["clientId"] == client_id for c in clients):
                info = admin.consumer_running_info(addr, group, client_id)
                break
    else:
        raise BadRequest(f"{client_id} is not a client of {group} on any broker")
    queues = [
        {"topic": mq["topic"], "brokerName": mq["brokerName"], "queueId": mq["queueId"], **row}
        for mq, row in sorted(
            info.get("mqTable", {}).items(),
            key=lambda item: (item[0]["topic"], item[0]["brokerName"], item[0]["queueId"]),
        )
    ]
    status = [{"topic": topic, **row} for topic, row in sorted(info.get("statusTable", {}).items())]
    subscriptions = [
        {
            "topic": sub.get("topic"),
            "expressionType": sub.get("expressionType", "TAG"),
            "subString": sub.get("subString"),
        }
        for sub in info.get("subscriptionSet", [])
    ]
    return Rendered(
        "client.html",
        {
            "title": f"Consumer {client_id}",
            "group": group,
            "client_id": client_id,
            "properties": sorted(info.get("properties", {}).items()),
            "queues": queues,
            "queue_headers": ["topic", "brokerName", "queueId", *_QUEUE_FIELDS],
            "status": status,
            "status_headers": ["topic", *_STATUS_FIELDS],
            "subscriptions": subscriptions,
        },
    )


# ProcessQueueInfo and ConsumeStatus fields, in mqadmin consumerStatus' order.
_QUEUE_FIELDS = (
    "commitOffset", "cachedMsgMinOffset", "cachedMsgMaxOffset", "cachedMsgCount", "cachedMsgSizeInMiB", "locked",
    "tryUnlockTimes", "lastLockTimestamp", "droped", "lastPullTimestamp", "lastConsumeTimestamp",
)  # fmt: skip
_STATUS_FIELDS = ("pullRT", "pullTPS", "consumeRT", "consumeOKTPS", "consumeFailedTPS", "consumeFailedMsgs")
