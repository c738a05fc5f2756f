"""One broker's status and configuration (Dashboard's "Status" and "Config" of a cluster row)."""

from __future__ import annotations

from .routes import BadRequest, Rendered, View, page


@page("/broker")
def broker(view: View) -> Rendered:
    """``?addr=``: a broker the NameServers know (never an address taken from the request alone)."""
    addr = view.text("addr", max_length=64)
    known = {
        a: name
        for name, data in view.admin.cluster_info().get("brokerAddrTable", {}).items()
        for a in data.get("brokerAddrs", {}).values()
    }
    if addr not in known:
        raise BadRequest(f"no broker at {addr} in the cluster")
    return Rendered(
        "broker.html",
        {
            "title": f"Broker {known[addr]}",
            "name": known[addr],
            "addr": addr,
            "status": sorted(view.admin.runtime_info(addr).items()),
            "config": sorted(view.admin.broker_config(addr).items()),
        },
    )
