"""One broker's status and configuration (Dashboard's "Status" and "Config" of a cluster row)."""

from __future__ import annotations

from .routes import Rendered, View, page


@page("/broker")
def broker(view: View) -> Rendered:
    """``?addr=``: a broker the NameServers know (never an address taken from the request alone)."""
    addr = view.broker_addr(view.text("addr", max_length=64))
    return Rendered(
        "broker.html",
        {
            "title": f"Broker {view.broker_name}",
            "name": view.broker_name,
            "addr": addr,
            "status": sorted(view.admin.runtime_info(addr).items()),
            "config": sorted(view.admin.broker_config(addr).items()),
        },
    )
