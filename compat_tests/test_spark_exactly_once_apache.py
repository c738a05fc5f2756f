"""The exactly-once sink's transactions against Apache 4.9.8's NameServer and broker (run when
``ROCKETMQ_BROKER_CLASSPATH`` names its jars): halves stored, a decision in Apache's KV config, ENDs sent as
requests and answered, check-backs answered from the ledger, and the UNIQ_KEY query that keeps a copy of an
ended half from being committed twice."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .apache_broker import CLASSPATH, CLASSPATH_ENV

if not CLASSPATH:
    pytest.skip(f"Apache broker not given: set {CLASSPATH_ENV} to 4.9.8's lib/* jars", allow_module_level=True)
pytest.importorskip("pyspark")

from spark import exactly_once as eo
from spark import queues as rq
from spark.sink import SinkSettings
from tests.ha.procs import until
from tests.spark.test_sink_exactly_once import halves, visible

from .apache_broker import apache_cluster
from .servers import call, create_topic_request

pytestmark = [pytest.mark.compat, pytest.mark.spark]
CHECKS = {"transactionCheckInterval": "1000", "transactionTimeOut": "1000", "transactionCheckMax": "100"}


def test_exactly_once_transactions_on_apache_4_9_8(tmp_path: Path) -> None:
    # Apache's NameServer keeps its KV config under $HOME unless told otherwise.
    with apache_cluster(tmp_path, CHECKS, {"kvConfigPath": str(tmp_path / "kvConfig.json")}) as (namesrv, broker):
        assert call(broker, create_topic_request("EosApache", 1)).code == 0
        settings = SinkSettings.from_options(
            {"namesrvAddr": namesrv, "producerGroup": "eos_apache_pg", "deliveryGuarantee": "exactly-once"}
        )
        servers = type("Servers", (), {"namesrv_addr": namesrv})()
        until(lambda: routed(settings, "EosApache"), 30, "the topic routed")
        kept = halves(settings, "EosApache", "w 0 kept", 20)
        halves(settings, "EosApache", "w 0 lost", 5)  # a failed task run of the same batch
        time.sleep(3.5)  # checked back while undecided (unknown): the broker made copies of them
        assert visible(servers, "EosApache") == []
        ledger = eo.Ledger(settings)
        ledger.put("w", 0, eo.Decision(True, round(time.time(), 3), 1.0, frozenset({"kept"})))
        assert ledger.get("w", 0) is not None  # in Apache's KV config
        assert eo.end_transactions(settings, kept[:10], commit=True, deadline=time.time() + 30) == 0
        until(lambda: len(visible(servers, "EosApache")) >= 20, 30, "the rest committed by the check-back")
        time.sleep(4)  # more check passes: nothing twice, nothing of the failed run
        assert sorted(visible(servers, "EosApache")) == sorted(f"kept-{i}".encode() for i in range(20))


def routed(settings: SinkSettings, topic: str) -> bool:
    try:
        return bool(rq.route(settings.connection(topic)).queue_datas)
    except rq.SourceError:
        return False
