"""Controller-mode failover with real processes: a NameServer with its embedded controller and two brokers
(SYNC_MASTER, SYNC_FLUSH, allAckInSyncStateSet), four producers sending over the wire, the master SIGKILLed
or SIGSTOPped under load. Every message acknowledged SEND_OK must be on the new master; duplicates are counted
and printed, and so are the time to a new master and to the first send it accepts."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from compat_tests.servers import call
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import CreateTopicRequestHeader
from tests.ha.procs import Proc, Producer, bodies, free_port, has_topic, until, write_properties

TOPIC = "KillTopic"
GROUP = "broker-kill"
QUEUES = 4


def _master_addr(namesrv: str) -> str | None:
    resp = call(namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 3)
    table = fastjson.loads(resp.body).get("brokerAddrTable", {})
    addrs = table.get(GROUP, {}).get("brokerAddrs", {})
    return addrs.get(0) or addrs.get("0")


def _sync_state_set(namesrv: str) -> list[int]:
    resp = call(namesrv, RemotingCommand.request(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP}), 3)
    return sorted(fastjson.loads(resp.body).get("syncStateSet", [])) if resp.code == ResponseCode.SUCCESS else []


@pytest.mark.chaos
@pytest.mark.parametrize("fault", [signal.SIGKILL, signal.SIGSTOP], ids=["SIGKILL", "SIGSTOP"])
def test_master_killed_or_frozen_under_load_loses_no_acknowledged_message(tmp_path: Path, fault: int) -> None:
    """SIGKILL closes the master's connections (the controller sees it at once); SIGSTOP leaves them open and
    silent (the controller waits for controllerHeartBeatTimeoutMills)."""
    ns_port = free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    ns_conf = write_properties(
        tmp_path / "namesrv.properties",
        {
            "listenPort": str(ns_port),
            "bindAddress": "127.0.0.1",
            "kvConfigPath": str(tmp_path / "kv.json"),
            "enableControllerInNamesrv": "true",
            "controllerDLegerPeers": f"n0-127.0.0.1:{free_port()}",
            "controllerDLegerSelfId": "n0",
            "controllerStorePath": str(tmp_path / "controller"),
            "scanNotActiveBrokerInterval": "500",
        },
    )
    procs = [Proc("gateway.namesrv", ns_conf, tmp_path)]
    brokers = {}
    try:
        for name in ("a", "b"):
            port = free_port()
            conf = write_properties(
                tmp_path / f"broker-{name}.conf",
                {
                    "brokerClusterName": "DefaultCluster",
                    "brokerName": GROUP,
                    "brokerIP1": "127.0.0.1",
                    "bindAddress": "127.0.0.1",
                    "listenPort": str(port),
                    "namesrvAddr": namesrv,
                    "storePathRootDir": str(tmp_path / name),
                    "enableControllerMode": "true",
                    "controllerAddr": namesrv,
                    "brokerRole": "SYNC_MASTER",
                    "flushDiskType": "SYNC_FLUSH",
                    "allAckInSyncStateSet": "true",
                    "brokerHeartbeatInterval": "300",
                    "controllerHeartBeatTimeoutMills": "3000",
                    "syncControllerMetadataPeriod": "1000",
                    "checkSyncStateSetPeriod": "500",
                    "haSendHeartbeatInterval": "500",
                },
            )
            proc = Proc("gateway.broker", conf, tmp_path)
            procs.append(proc)
            brokers[f"127.0.0.1:{port}"] = proc
            if name == "a":  # a first, so that it is the first master
                until(lambda: _master_addr(namesrv), 30, "a master")
        master = until(lambda: _master_addr(namesrv), 30, "a master")
        slave = next(addr for addr in brokers if addr != master)
        until(lambda: _sync_state_set(namesrv) == [1, 2], 30, "both brokers in the SyncStateSet")
        header = CreateTopicRequestHeader(
            topic=TOPIC,
            default_topic="TBW102",
            read_queue_nums=QUEUES,
            write_queue_nums=QUEUES,
            perm=6,
            topic_filter_type="SINGLE_TAG",
        )
        assert call(master, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.encode())).code == 0
        until(lambda: has_topic(slave, TOPIC), 30, "topic synced to the slave")

        current = {"addr": master}
        stop = threading.Event()
        producers = [Producer(n, TOPIC, QUEUES, lambda: current["addr"], stop) for n in range(4)]
        for p in producers:
            p.start()
        until(lambda: sum(len(p.acked) for p in producers) >= 200, 30, "200 messages acknowledged")
        killed_at = time.monotonic()
        brokers[master].proc.send_signal(fault)
        new_master = until(lambda: (m := _master_addr(namesrv)) and m != master and m, 30, "a new master")
        to_new_master = time.monotonic() - killed_at
        current["addr"] = new_master
        acked_before = sum(len(p.acked) for p in producers)
        until(lambda: sum(len(p.acked) for p in producers) > acked_before, 30, "a send accepted by the new master")
        to_first_send = time.monotonic() - killed_at
        time.sleep(0.5)
        stop.set()
        for p in producers:
            p.join(10)
        acked = [b for p in producers for b in p.acked]
        found = bodies(new_master, TOPIC, QUEUES)
        lost = [b for b in acked if b not in found]
        duplicates = sum(c - 1 for c in found.values() if c > 1)
        print(
            f"\nfailover after {signal.Signals(fault).name}: {len(acked)} acknowledged, {len(lost)} lost, "
            f"{duplicates} duplicates, "
            f"{sum(p.failed for p in producers)} sends failed; new master after {to_new_master:.2f} s, "
            f"first send accepted after {to_first_send:.2f} s"
        )
        assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]}"
    finally:
        for proc in reversed(procs):
            proc.stop()
