"""The C++ client (PyPI ``rocketmq==0.4.4``) against three of our brokers in one DLedger group (issue 27 item 4):
it finds the master (brokerId 0) by route, its sends are acknowledged once a majority holds them, and its pull
consumer reads them back, each exactly once."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

if importlib.util.find_spec("rocketmq") is None:
    pytest.skip("PyPI rocketmq==0.4.4 (the C++ client) is not installed", allow_module_level=True)

from tests.broker.dledger_group import TOPIC, Group, bootstrap, settled_route
from tests.ha.procs import until

from .test_cpp_client import _unique, check_messages, produce, pull_all

pytestmark = [pytest.mark.compat]


def test_cpp_producer_and_pull_consumer_on_a_dledger_group(tmp_path: Path) -> None:
    # DLedger's default timings: a loaded machine's pauses do not make the group elect again mid-run.
    group = Group(tmp_path / "group", timings={})
    group.root.mkdir()
    try:
        group.start()
        until(lambda: group.route() or bootstrap(group), 30, "the topic routed")
        settled_route(group, {"n0", "n1", "n2"})
        servers = SimpleNamespace(namesrv_addr=group.namesrv)
        run_id = _unique("dledger")
        produce(tmp_path, servers, TOPIC, run_id, 20)
        check_messages(pull_all(tmp_path, servers, TOPIC).messages, run_id, range(20), TOPIC, "pulled")
    finally:
        group.stop()
