"""Apache RocketMQ's own broker as a child process, for the HA interop tests.

Nothing of Apache's is in this repository: ``ROCKETMQ_BROKER_CLASSPATH`` names the jars of a 4.9.8 broker
built outside it (its distribution's ``lib/*``). Without it the tests that need one skip.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .servers import jdk_tool

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
