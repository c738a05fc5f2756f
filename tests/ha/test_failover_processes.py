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

from compat_tests.servers import call, create_topic_request, free_port
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from tests.ha.procs import Proc, Producer, bodies, has_topic, until, write_properties

TOPIC = "KillTopic"
GROUP = "broker-kill"
QUEUES = 4


def _master_addr(namesrv: str) -> str | None:
    resp = call(namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 3)
    table = fastjson.loads(resp.body).get("brokerAddrTable", {})
    addrs = table.get(GROUP, {}).get("brokerAddrs", {})
    return addrs.get(0) or addrs.get("0")


def _sync_state_set(controllers: list[str]) -> list[int]:
    for addr in controllers:  # the leader answers, the others say CONTROLLER_NOT_LEADER
        request = RemotingCommand.request(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP})
        try:
            resp = call(addr, request, 3)
        except OSError:
            continue  # a controller that is down
        if resp.code == ResponseCode.SUCCESS:
            return sorted(fastjson.loads(resp.body).get("syncStateSet", []))
    return []


class Cluster:
    """A NameServer, the controllers (embedded in it, or ``standalone`` processes of one Raft group) and two
    brokers of GROUP in controller mode (SYNC_MASTER, SYNC_FLUSH, allAckInSyncStateSet), as processes;
    broker a starts first so that it is the first master."""

    def __init__(self, root: Path, standalone: int = 0) -> None:
        self.procs: list[Proc] = []
        ns_port = free_port()
        self.namesrv = f"127.0.0.1:{ns_port}"
        peers = ";".join(f"n{i}-127.0.0.1:{free_port()}" for i in range(max(standalone, 1)))
        raft = {"controllerDLegerPeers": peers, "scanNotActiveBrokerInterval": "500"}
        namesrv = {"listenPort": str(ns_port), "bindAddress": "127.0.0.1", "kvConfigPath": str(root / "kv.json")}
        if not standalone:
            namesrv.update(raft, enableControllerInNamesrv="true", controllerStorePath=str(root / "controller"))
        self.procs.append(Proc("gateway.namesrv", write_properties(root / "namesrv.properties", namesrv), root))
        self.controllers: dict[str, Proc] = {}
        for i in range(standalone):
            port = free_port()
            conf = {
                **raft,
                "controllerDLegerSelfId": f"n{i}",
                "controllerStorePath": str(root / f"controller-{i}"),
                "listenPort": str(port),
                "bindAddress": "127.0.0.1",
            }
            proc = Proc("gateway.controller", write_properties(root / f"controller-{i}.properties", conf), root)
            self.procs.append(proc)
            self.controllers[f"127.0.0.1:{port}"] = proc
        self.controller_addrs = list(self.controllers) or [self.namesrv]
        self.brokers: dict[str, Proc] = {}
        for name in ("a", "b"):
            port = free_port()
            conf = write_properties(
                root / f"broker-{name}.conf",
                {
                    "brokerClusterName": "DefaultCluster",
                    "brokerName": GROUP,
                    "brokerIP1": "127.0.0.1",
                    "bindAddress": "127.0.0.1",
                    "listenPort": str(port),
                    "namesrvAddr": self.namesrv,
                    "storePathRootDir": str(root / name),
                    "mappedFileSizeCommitLog": str(16 * 1024 * 1024),  # not 1 GiB a broker on the test disk
                    "enableControllerMode": "true",
                    "controllerAddr": ";".join(self.controller_addrs),
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
            proc = Proc("gateway.broker", conf, root)
            self.procs.append(proc)
            self.brokers[f"127.0.0.1:{port}"] = proc
            if name == "a":
                until(lambda: _master_addr(self.namesrv), 30, "a master")

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()

    def ready_with_topic(self) -> str:
        """The master, once both brokers are in the SyncStateSet and the slave has the topic."""
        master = until(lambda: _master_addr(self.namesrv), 30, "a master")
        slave = next(addr for addr in self.brokers if addr != master)
        until(lambda: _sync_state_set(self.controller_addrs) == [1, 2], 30, "both brokers in the SyncStateSet")
        assert call(master, create_topic_request(TOPIC, QUEUES)).code == ResponseCode.SUCCESS
        until(lambda: has_topic(slave, TOPIC), 30, "topic synced to the slave")
        return master

    def failover_under_load(self, fault: int, label: str) -> None:
        """Producers on the master; ``fault`` to it; every acknowledged message must be on the new master."""
        master = self.ready_with_topic()
        current = {"addr": master}
        stop = threading.Event()
        producers = [Producer(n, TOPIC, QUEUES, lambda: current["addr"], stop) for n in range(4)]
        for p in producers:
            p.start()
        try:
            until(lambda: sum(len(p.acked) for p in producers) >= 200, 30, "200 messages acknowledged")
            killed_at = time.monotonic()
            self.brokers[master].proc.send_signal(fault)
            new_master = until(lambda: (m := _master_addr(self.namesrv)) and m != master and m, 30, "a new master")
            to_new_master = time.monotonic() - killed_at
            current["addr"] = new_master
            acked_before = sum(len(p.acked) for p in producers)
            until(lambda: sum(len(p.acked) for p in producers) > acked_before, 30, "a send accepted by the new master")
            to_first_send = time.monotonic() - killed_at
            time.sleep(0.5)
        finally:
            stop.set()
            for p in producers:
                p.join(10)
        acked = [b for p in producers for b in p.acked]
        found = bodies(new_master, TOPIC, QUEUES)
        lost = [b for b in acked if b not in found]
        duplicates = sum(c - 1 for c in found.values() if c > 1)
        print(
            f"\nfailover after {label}: {len(acked)} acknowledged, {len(lost)} lost, {duplicates} duplicates, "
            f"{sum(p.failed for p in producers)} sends failed; new master after {to_new_master:.2f} s, "
            f"first send accepted after {to_first_send:.2f} s"
        )
        assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]}"


@pytest.mark.chaos
@pytest.mark.parametrize("fault", [signal.SIGKILL, signal.SIGSTOP], ids=["SIGKILL", "SIGSTOP"])
def test_master_killed_or_frozen_under_load_loses_no_acknowledged_message(tmp_path: Path, fault: int) -> None:
    """SIGKILL closes the master's connections (the controller sees it at once); SIGSTOP leaves them open and
    silent (the controller waits for controllerHeartBeatTimeoutMills)."""
    cluster = Cluster(tmp_path)
    try:
        cluster.failover_under_load(fault, signal.Signals(fault).name)
    finally:
        cluster.stop()


@pytest.mark.chaos
def test_three_controllers_the_leader_killed_then_the_master_still_fails_over(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, standalone=3)
    try:
        cluster.ready_with_topic()

        def leader() -> str | None:
            for addr in cluster.controller_addrs:
                if cluster.controllers[addr].proc.poll() is not None:
                    continue
                resp = call(addr, RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO), 3)
                if resp.ext_fields.get("isLeader") == "true":
                    return addr
            return None

        old = until(leader, 30, "a controller leader")
        cluster.controllers[old].kill()
        new = until(lambda: (n := leader()) and n != old and n, 30, "a new controller leader")

        def both_alive() -> bool:  # mqadmin getSyncStateSet's view, from the new leader
            request = RemotingCommand.request(
                RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=b'["' + GROUP.encode() + b'"]'
            )
            info = fastjson.loads(call(new, request, 3).body)["replicasInfoTable"][GROUP]
            return all(r["alive"] for r in info["inSyncReplicas"]) and len(info["inSyncReplicas"]) == 2

        until(both_alive, 30, "both brokers heartbeating the new leader")
        cluster.failover_under_load(signal.SIGKILL, "SIGKILL of the master, one controller of three down")
    finally:
        cluster.stop()
