"""Controller-mode failover with real processes: a NameServer with its embedded controller and two brokers
(SYNC_MASTER, SYNC_FLUSH, allAckInSyncStateSet), four producers sending over the wire, the master SIGKILLed
or SIGSTOPped under load. Every message acknowledged SEND_OK must be on the new master; duplicates are counted
and printed, and so are the time to a new master and to the first send it accepts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from compat_tests.servers import call
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import CreateTopicRequestHeader
from gateway.remoting.message import decode_records
from tests.broker.test_broker_server import pull_request, send_header

TOPIC = "KillTopic"
GROUP = "broker-kill"
QUEUES = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except OSError:
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} not reached in {timeout} s"
        time.sleep(0.05)


class Proc:
    """A child ``python -m <module> -c <file>`` whose output is kept (and printed if the test fails)."""

    def __init__(self, module: str, conf: Path, root: Path) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1", HOME=str(root))
        self.log = open(root / f"{conf.stem}.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "-c", str(conf)], stdout=self.log, stderr=subprocess.STDOUT, env=env
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)  # stopped or not
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a frozen one too
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


def _write(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def _master_addr(namesrv: str) -> str | None:
    resp = call(namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 3)
    table = fastjson.loads(resp.body).get("brokerAddrTable", {})
    addrs = table.get(GROUP, {}).get("brokerAddrs", {})
    return addrs.get(0) or addrs.get("0")


def _sync_state_set(namesrv: str) -> list[int]:
    resp = call(namesrv, RemotingCommand.request(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP}), 3)
    return sorted(fastjson.loads(resp.body).get("syncStateSet", [])) if resp.code == ResponseCode.SUCCESS else []


def _has_topic(addr: str) -> bool:
    resp = call(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG), 3)
    return TOPIC in fastjson.loads(resp.body).get("topicConfigTable", {})


def _bodies(addr: str) -> Counter[bytes]:
    found: Counter[bytes] = Counter()
    for queue_id in range(QUEUES):
        offset = 0
        while True:
            resp = call(addr, pull_request(TOPIC, queue_id, offset, sub="*", timeout_ms=0), 5)
            if resp.code != ResponseCode.SUCCESS:
                break
            msgs = decode_records(resp.body)
            found.update(m.body for m in msgs)
            offset = int(resp.ext_fields["nextBeginOffset"])
    return found


class Producer(threading.Thread):
    """Sends numbered messages to whatever ``target()`` says until stopped; remembers what was acknowledged."""

    def __init__(self, n: int, target, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.n, self.target, self.stop_event = n, target, stop
        self.acked: list[bytes] = []
        self.failed = 0

    def run(self) -> None:
        i = 0
        while not self.stop_event.is_set():
            body = b"p%d-%d" % (self.n, i)
            i += 1
            addr = self.target()
            req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header(TOPIC, {}, i % QUEUES), body)
            try:
                resp = call(addr, req, 5)
            except OSError:
                self.failed += 1
                time.sleep(0.02)
                continue
            if resp.code == ResponseCode.SUCCESS:
                self.acked.append(body)
            else:
                self.failed += 1


@pytest.mark.chaos
@pytest.mark.parametrize("fault", [signal.SIGKILL, signal.SIGSTOP], ids=["SIGKILL", "SIGSTOP"])
def test_master_killed_or_frozen_under_load_loses_no_acknowledged_message(tmp_path: Path, fault: int) -> None:
    """SIGKILL closes the master's connections (the controller sees it at once); SIGSTOP leaves them open and
    silent (the controller waits for controllerHeartBeatTimeoutMills)."""
    ns_port = _free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    ns_conf = _write(
        tmp_path / "namesrv.properties",
        {
            "listenPort": str(ns_port),
            "bindAddress": "127.0.0.1",
            "kvConfigPath": str(tmp_path / "kv.json"),
            "enableControllerInNamesrv": "true",
            "controllerDLegerPeers": f"n0-127.0.0.1:{_free_port()}",
            "controllerDLegerSelfId": "n0",
            "controllerStorePath": str(tmp_path / "controller"),
            "scanNotActiveBrokerInterval": "500",
        },
    )
    procs = [Proc("gateway.namesrv", ns_conf, tmp_path)]
    brokers = {}
    try:
        for name in ("a", "b"):
            port = _free_port()
            conf = _write(
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
                _until(lambda: _master_addr(namesrv), 30, "a master")
        master = _until(lambda: _master_addr(namesrv), 30, "a master")
        slave = next(addr for addr in brokers if addr != master)
        _until(lambda: _sync_state_set(namesrv) == [1, 2], 30, "both brokers in the SyncStateSet")
        header = CreateTopicRequestHeader(
            topic=TOPIC,
            default_topic="TBW102",
            read_queue_nums=QUEUES,
            write_queue_nums=QUEUES,
            perm=6,
            topic_filter_type="SINGLE_TAG",
        )
        assert call(master, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.encode())).code == 0
        _until(lambda: _has_topic(slave), 30, "topic synced to the slave")

        current = {"addr": master}
        stop = threading.Event()
        producers = [Producer(n, lambda: current["addr"], stop) for n in range(4)]
        for p in producers:
            p.start()
        _until(lambda: sum(len(p.acked) for p in producers) >= 200, 30, "200 messages acknowledged")
        killed_at = time.monotonic()
        brokers[master].proc.send_signal(fault)
        new_master = _until(lambda: (m := _master_addr(namesrv)) and m != master and m, 30, "a new master")
        to_new_master = time.monotonic() - killed_at
        current["addr"] = new_master
        acked_before = sum(len(p.acked) for p in producers)
        _until(lambda: sum(len(p.acked) for p in producers) > acked_before, 30, "a send accepted by the new master")
        to_first_send = time.monotonic() - killed_at
        time.sleep(0.5)
        stop.set()
        for p in producers:
            p.join(10)
        acked = [b for p in producers for b in p.acked]
        found = _bodies(new_master)
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
