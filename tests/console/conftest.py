"""A cluster for the console tests, in this process: a NameServer, two brokers (broker-a, broker-b) of
DefaultCluster, and a console against them on a free port."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater

from gateway.broker.config import load_broker_config
from gateway.broker.controller import BrokerController
from gateway.client import Admin, ConsumeStatus, MessageExt, PushConsumer
from gateway.console.server import ConsoleService
from gateway.console.settings import ConsoleSettings
from gateway.namesrv.service import NamesrvController
from tests.namesrv.conftest import loopback_namesrv_config

BROKERS = ("broker-a", "broker-b")


@dataclass
class Cluster:
    """The servers, an Admin client against them, and how to start consoles on them."""

    namesrv: NamesrvController
    brokers: dict[str, BrokerController]
    admin: Admin
    consoles: list[ConsoleService] = field(default_factory=list)

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv.port}"

    def console(self, sample_seconds: float = 10.0, **settings: Any) -> str:
        """A console on a free port with ``settings``; its base URL (no trailing slash)."""
        settings = ConsoleSettings(self.namesrv_addr, port=0, **settings).check()
        service = ConsoleService(settings, reactor, sample_seconds)
        service.startService()
        self.consoles.append(service)
        return service.url.rstrip("/")


def broker_config(root: Path, name: str, namesrv_addr: str, **extra: str) -> Any:
    return load_broker_config(
        None,
        {
            "bindAddress": "127.0.0.1",
            "brokerIP1": "127.0.0.1",
            "brokerName": name,
            "listenPort": "0",
            "namesrvAddr": namesrv_addr,
            "storePathRootDir": str(root / name),
            "mappedFileSizeCommitLog": str(1 << 20),
            "traceTopicEnable": "true",
            **extra,
        },
    )


async def start_cluster(root: Path, **broker_extra: str) -> Cluster:
    """A NameServer and the two brokers, started and routed (TBW102 known to the NameServer from both)."""
    namesrv = NamesrvController(loopback_namesrv_config(root), reactor)
    namesrv.startService()
    addr = f"127.0.0.1:{namesrv.port}"
    brokers = {}
    for name in BROKERS:
        cfg, store_cfg = broker_config(root, name, addr, **broker_extra)
        brokers[name] = BrokerController(cfg, store_cfg, reactor)
        brokers[name].startService()
    for broker in brokers.values():
        await broker.when_ready()
    return Cluster(namesrv, brokers, Admin(addr))


async def stop_cluster(cluster: Cluster) -> None:
    for console in cluster.consoles:
        await console.stopService()
    await cluster.admin.shutdown()
    for broker in cluster.brokers.values():
        await broker.stopService()
    await cluster.namesrv.stopService()


@pytest_twisted.async_yield_fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    started = await start_cluster(tmp_path)
    yield started
    await stop_cluster(started)


def consumer_of(
    cluster: Cluster, group: str, topic: str, status: ConsumeStatus = ConsumeStatus.CONSUME_SUCCESS, **options: Any
) -> tuple[PushConsumer, list[MessageExt]]:
    """A push consumer of ``topic`` (not started yet) answering ``status``, and the messages it gets."""
    got: list[MessageExt] = []
    consumer = PushConsumer(group, cluster.namesrv_addr, **options)
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(lambda msgs: got.extend(msgs) or status)
    return consumer, got


def console_process(namesrv: str, *options: str) -> tuple[subprocess.Popen[str], str]:
    """``rocketmq-gateway console`` against ``namesrv`` (with ``options``) in a child process on a free port
    (blocking: call it with deferToThread in a reactor's test); the process and its URL once it printed its ready
    line. Stop it with :func:`end_process`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "console", "-n", namesrv, "--port", "0", *options],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    found: list[str] = []

    def ready() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = re.search(r"console ready: (http://\S+?)/? ", line)
            if m:
                found.append(m.group(1))
                return

    reader = threading.Thread(target=ready, daemon=True)
    reader.start()
    reader.join(30)
    if not found:
        end_process(proc)
        raise AssertionError("the console did not start")
    return proc, found[0]


def end_process(proc: subprocess.Popen[str]) -> None:
    """Stop a console process and close its pipe."""
    proc.terminate()
    proc.wait(30)
    if proc.stdout is not None:
        proc.stdout.close()


def http(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """Status and page over plain HTTP (blocking: call it with deferToThread)."""
    request = urllib.request.Request(url, data, headers or {})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


async def sleep(seconds: float) -> None:
    await deferLater(reactor, seconds, lambda: None)


async def wait_until(condition: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``condition`` every 50 ms; fail the test after ``timeout`` seconds."""
    deadline = reactor.seconds() + timeout
    while not condition():
        if reactor.seconds() > deadline:
            pytest.fail(f"{what} not met within {timeout}s")
        await sleep(0.05)
