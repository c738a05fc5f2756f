"""Apache RocketMQ's own NameServer and broker as child processes, for the interop tests.

Nothing of Apache's is in this repository: ``ROCKETMQ_BROKER_CLASSPATH`` names the jars of a 4.9.8 broker
built outside it (its distribution's ``lib/*``). Without it the tests that need one skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from tests.ha.procs import Proc, until, write_properties

from .servers import call, free_port, jdk_tool

CLASSPATH_ENV = "ROCKETMQ_BROKER_CLASSPATH"
CLASSPATH = os.environ.get(CLASSPATH_ENV, "").strip()

# BrokerStartup configures logback from $rocketmqHome/conf/logback_broker.xml and exits without it.
LOGBACK = """<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level %logger{20} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
"""
# The store maps and frees direct buffers through JDK internals that Java 17 closes by default.
OPENS = [
    f"--add-opens=java.base/{package}=ALL-UNNAMED"
    for package in ("java.nio", "sun.nio.ch", "java.lang", "java.lang.reflect", "java.util", "jdk.internal.ref")
]


NAMESRV_STARTUP = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_STARTUP = "org.apache.rocketmq.broker.BrokerStartup"


def apache_java_argv(
    main: str, conf: Path, *, classpath: str = CLASSPATH, heap: str = "256m", jvm: Sequence[str] = ()
) -> list[str]:
    """``java`` running Apache's ``main`` (NamesrvStartup, BrokerStartup) with ``-c conf``: ``heap`` for the heap
    and direct memory, the module openings Java 17 needs, then ``jvm``'s options."""
    return [
        jdk_tool("java"),
        f"-Xms{heap}",
        f"-Xmx{heap}",
        f"-XX:MaxDirectMemorySize={heap}",
        *OPENS,
        *jvm,
        "-cp",
        classpath,
        main,
        "-c",
        str(conf),
    ]


def apache_broker_argv(conf: Path, home: Path) -> list[str]:
    """The command that starts Apache's broker with the properties file ``conf``; ``home`` becomes its
    ROCKETMQ_HOME (``rocketmqHome``), so the file should name it."""
    (home / "conf").mkdir(parents=True, exist_ok=True)
    (home / "conf" / "logback_broker.xml").write_text(LOGBACK)
    return apache_java_argv(BROKER_STARTUP, conf)


@contextmanager
def apache_cluster(
    root: Path, settings: dict[str, str] | None = None, namesrv_settings: dict[str, str] | None = None
) -> Iterator[tuple[str, str]]:
    """Apache's NameServer and broker ``broker-a`` of DefaultCluster on free ports, the store in ``root/store``,
    ``settings`` over the broker's and ``namesrv_settings`` over the NameServer's; the NameServer and broker
    addresses once the broker registered. Leaving stops both (SIGTERM: the broker writes its config files as
    it shuts down)."""
    home = root / "home"
    (home / "conf").mkdir(parents=True, exist_ok=True)
    (home / "conf" / "logback_namesrv.xml").write_text(LOGBACK)
    namesrv_port = free_port()
    namesrv_conf = write_properties(
        root / "namesrv.properties", {"listenPort": str(namesrv_port), **(namesrv_settings or {})}
    )
    namesrv = Proc(
        "",
        namesrv_conf,
        root,
        apache_java_argv(NAMESRV_STARTUP, namesrv_conf, jvm=[f"-Drocketmq.home.dir={home}"]),
    )
    namesrv_addr = f"127.0.0.1:{namesrv_port}"
    try:
        with apache_broker(root, namesrv_addr, settings) as broker_addr:
            yield namesrv_addr, broker_addr
    finally:
        namesrv.stop()


@contextmanager
def apache_broker(root: Path, namesrv_addr: str, settings: dict[str, str] | None = None) -> Iterator[str]:
    """Apache's broker ``broker-a`` of DefaultCluster on a free port, the store in ``root/store``, ``settings``
    over its own, registering with the NameServer at ``namesrv_addr`` (Apache's or ours); its address once it
    registered there. Leaving stops it (SIGTERM: it writes its config files as it shuts down)."""
    home = root / "home"
    broker_port = free_port()
    broker_conf = write_properties(
        root / "broker.conf",
        {
            "brokerClusterName": "DefaultCluster",
            "brokerName": "broker-a",
            "listenPort": str(broker_port),
            "namesrvAddr": namesrv_addr,
            "brokerIP1": "127.0.0.1",
            "storePathRootDir": str(root / "store"),
            "storePathCommitLog": str(root / "store" / "commitlog"),
            "rocketmqHome": str(home),
            "autoCreateTopicEnable": "true",
            **(settings or {}),
        },
    )
    broker = Proc("", broker_conf, root, apache_broker_argv(broker_conf, home))

    def registered() -> bool:
        response = call(namesrv_addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 3)
        return b"broker-a" in (response.body or b"")

    try:
        until(registered, 90, "Apache's broker registered")
        yield f"127.0.0.1:{broker_port}"
    finally:
        broker.stop()
