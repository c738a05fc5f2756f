"""The cluster page: brokers per cluster and group, with role, version, put/get TPS and disk."""

from __future__ import annotations

from typing import Any

from .routes import Rendered, View, page


@page("/login")
def login(view: View) -> Rendered:
    return Rendered("login.html", {"title": "Log in"})


@page("/", nav="Cluster")
def cluster(view: View) -> Rendered:
    info = view.admin.cluster_info()
    table = info.get("brokerAddrTable", {})
    clusters: list[dict[str, Any]] = []
    for name, broker_names in sorted(info.get("clusterAddrTable", {}).items()):
        brokers = []
        for broker_name in sorted(broker_names):
            for broker_id, addr in sorted(table.get(broker_name, {}).get("brokerAddrs", {}).items(), key=_id):
                brokers.append({"name": broker_name, "id": broker_id, "addr": addr, **_runtime(view, addr)})
        clusters.append({"name": name, "brokers": brokers})
    return Rendered("cluster.html", {"title": "Cluster", "clusters": clusters})


def _id(item: tuple[Any, str]) -> int:
    return int(item[0])


def _runtime(view: View, addr: str) -> dict[str, Any]:
    try:
        info = view.admin.runtime_info(addr)
    except OSError as e:
        return {"error": str(e)}
    return {
        "version": info.get("brokerVersionDesc", ""),
        "put_tps": (info.get("putTps") or "").split(" ")[0],
        "get_tps": (info.get("getTransferedTps") or "").split(" ")[0],
        "disk": info.get("commitLogDiskRatio", ""),
    }
