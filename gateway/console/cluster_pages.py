"""The cluster page: brokers per cluster and group, with role, version, put/get TPS, disk and HA or DLedger
state."""

from __future__ import annotations

from typing import Any

from gateway.admin.ext import AdminError

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
            group = []
            for broker_id, addr in sorted(table.get(broker_name, {}).get("brokerAddrs", {}).items(), key=_id):
                role = "MASTER" if int(broker_id) == 0 else "SLAVE"
                group.append({"name": broker_name, "id": broker_id, "addr": addr, "role": role, "cluster": name})
                group[-1].update(_runtime(view, addr))
            _replication(group)
            brokers.extend(group)
        clusters.append({"name": name, "brokers": brokers})
    return Rendered("cluster.html", {"title": "Cluster", "clusters": clusters})


def _id(item: tuple[Any, str]) -> int:
    return int(item[0])


def _runtime(view: View, addr: str) -> dict[str, Any]:
    try:
        info = view.admin.runtime_info(addr)
    except (AdminError, OSError) as e:  # one broker down or refusing: its row says why, the page still shows
        return {"error": str(e)}
    out = {
        "version": info.get("brokerVersionDesc", ""),
        "put_tps": (info.get("putTps") or "").split(" ")[0],
        "get_tps": (info.get("getTransferedTps") or "").split(" ")[0],
        "disk": info.get("commitLogDiskRatio", ""),
        "max_offset": int(info.get("commitLogMaxOffset") or 0),
        "state": "",
    }
    if "dLedgerRole" in info:  # a DLedger group member: its role and term, not the broker id, say who leads
        out["role"] = info["dLedgerRole"]
        out["state"] = f"DLedger term {info.get('dLedgerTerm')}, committed {info.get('dLedgerCommittedIndex')}"
    return out


def _replication(group: list[dict[str, Any]]) -> None:
    """A slave's HA state: how far its commitlog is behind its master's (bytes)."""
    masters = [b for b in group if b["role"] == "MASTER" and "error" not in b]
    for b in group:
        if b["role"] == "SLAVE" and masters and "error" not in b and not b["state"]:
            behind = masters[0]["max_offset"] - b["max_offset"]
            b["state"] = f"HA: {behind} bytes behind" if behind > 0 else "HA: in sync"
