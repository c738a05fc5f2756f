"""Topics: the list (by kind) and one topic's route, status per queue, consumer groups and config."""

from __future__ import annotations

import argparse
from typing import Any

from gateway.admin.cli import Table, topic_status
from gateway.remoting.codes import PermName
from gateway.remoting.names import (
    DLQ_GROUP_TOPIC_PREFIX,
    REPLY_TOPIC_POSTFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    is_system_topic,
)

from .routes import Rendered, View, page

KINDS = ("normal", "retry", "dlq", "system")


def topic_kind(topic: str, reserved: frozenset[str] = frozenset()) -> str:
    """Dashboard's topic types: a retry or DLQ topic of a group, a system topic (also the topics named after a
    cluster or broker, and a cluster's reply topic: ``reserved``), or a normal one."""
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "retry"
    if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return "dlq"
    if is_system_topic(topic) or topic in reserved:
        return "system"
    return "normal"


def reserved_topics(cluster_info: dict[str, Any]) -> frozenset[str]:
    """The topics a cluster's brokers make for themselves: their cluster's name, their own, the reply topic."""
    clusters = set(cluster_info.get("clusterAddrTable", {}))
    names = clusters | set(cluster_info.get("brokerAddrTable", {}))
    return frozenset(names | {f"{c}_{REPLY_TOPIC_POSTFIX}" for c in clusters})


@page("/topics", nav="Topics")
def topics(view: View) -> Rendered:
    kind = view.choice("kind", KINDS)
    needle = view.text("filter", default="", max_length=255)
    reserved = reserved_topics(view.admin.cluster_info())
    names = [t for t in view.admin.topic_list() if topic_kind(t, reserved) == kind and needle in t]
    return Rendered("topics.html", {"title": "Topics", "topics": names, "kind": kind, "kinds": KINDS, "filter": needle})


@page("/topic")
def topic(view: View) -> Rendered:
    name = view.topic()
    admin = view.admin
    # A topic just created is routed once its brokers register again: until then the page says so and shows
    # what it can.
    route: dict[str, Any] = {}
    with admin.part():
        route = admin.topic_route(name)
    masters = admin.route_masters(name, route)
    queue_datas = sorted(route.get("queueDatas", []), key=lambda qd: qd["brokerName"])
    brokers = {bd["brokerName"]: bd.get("brokerAddrs", {}) for bd in route.get("brokerDatas", [])}
    routes = [
        {
            "brokerName": qd["brokerName"],
            "addrs": ", ".join(f"{bid}:{addr}" for bid, addr in sorted(brokers.get(qd["brokerName"], {}).items())),
            "readQueueNums": qd["readQueueNums"],
            "writeQueueNums": qd["writeQueueNums"],
            "perm": PermName.perm_to_string(qd["perm"]),
            "topicSysFlag": qd.get("topicSysFlag", 0),
        }
        for qd in queue_datas
    ]
    status = Table([], ["brokerName", "queueId", "minOffset", "maxOffset", "lastUpdated"])
    if masters:
        status = topic_status(admin, argparse.Namespace(topic=name))
    groups: dict[str, dict[str, Any]] = {}
    for addr in masters.values():
        with admin.part():
            for group in admin.groups_of_topic(addr, name):
                row = groups.setdefault(group, {"group": group, "lag": 0, "consumeTps": 0.0})
                with admin.part():
                    stats = admin.consume_stats(addr, group, name)
                    row["consumeTps"] += stats.get("consumeTps", 0)
                    row["lag"] += sum(
                        r["brokerOffset"] - r["consumerOffset"] for r in stats.get("offsetTable", {}).values()
                    )
    config = {
        "topicName": name,
        "readQueueNums": sum(qd["readQueueNums"] for qd in queue_datas),
        "writeQueueNums": sum(qd["writeQueueNums"] for qd in queue_datas),
        "perm": PermName.perm_to_string(queue_datas[0]["perm"]) if queue_datas else "-",
        "order": "true" if route.get("orderTopicConf") else "false",
        "kind": topic_kind(name, reserved_topics(admin.cluster_info())),
    }
    return Rendered(
        "topic.html",
        {
            "title": f"Topic {name}",
            "topic": config,
            "routes": routes,
            "status": status,
            "groups": sorted(groups.values(), key=lambda g: g["group"]),
            "brokers": sorted(masters),
        },
    )
