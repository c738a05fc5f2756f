"""Name server settings under RocketMQ's own namesrv.properties keys (NamesrvConfig + NettyServerConfig).

Java's Configuration keeps every setting in one properties view: GET_NAMESRV_CONFIG returns it,
UPDATE_NAMESRV_CONFIG changes it at run time and rewrites ``configStorePath`` (escaped as
``Properties.store`` escapes, so no value can add a key to the file).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.config import (
    ConfigError,
    apply_properties,
    black_listed,
    config_properties,
    load_properties,
    remote_update,
)
from gateway.otlp import MetricsPushKeys, push_config_problem
from gateway.persist import rewrite_properties

# Keys another part of the program reads: TLS, and the embedded controller's (gateway.controller.config).
IGNORED_PREFIXES = ("tls.", "controller", "enableElectUncleanMaster", "notifyBrokerRoleChanged")


if TYPE_CHECKING:
    from gateway.console.settings import ConsoleSettings


def _home_file(name: str) -> str:
    return str(Path.home() / "namesrv" / name)


@dataclass
class NamesrvConfig(MetricsPushKeys):
    """Attribute names are namesrv.properties keys; times are milliseconds."""

    rocketmqHome: str | None = field(default_factory=lambda: os.environ.get("ROCKETMQ_HOME"))
    kvConfigPath: str = field(default_factory=lambda: _home_file("kvConfig.json"))
    configStorePath: str = field(default_factory=lambda: _home_file("namesrv.properties"))
    productEnvName: str = "center"
    clusterTest: bool = False
    orderMessageEnable: bool = False
    # Keys UPDATE_NAMESRV_CONFIG may not change, ';'-separated.
    configBlackList: str = "configBlackList;configStorePath;kvConfigPath"
    # NettyServerConfig.
    listenPort: int = 9876
    # Ours: Java always binds every interface.
    bindAddress: str = "0.0.0.0"
    # Java hard-codes these two (scan every 10 s, first after 5 s; expire after 2 min).
    scanNotActiveBrokerInterval: int = 10000
    brokerChannelExpiredTime: int = 120000
    # Ours: start with an empty KV table (the broken files kept aside) when kvConfig.json and its .bak
    # are both unreadable, instead of refusing to start.
    startWithCorruptStateFiles: bool = False
    # Ours: the most bytes all connections together may hold in incomplete frames and unsent replies; past it
    # the newest such connections are closed. Always on (must be positive); read at start.
    remotingMaxBufferedBytes: int = 64 * 1024 * 1024
    # Ours (the broker's key): check requests against plain_acl.yml under rocketmqHome; reads stay open, the
    # rest needs an admin account (gateway.acl.namesrv_acl). Read at start.
    aclEnable: bool = False
    # RocketMQ 5: run a controller inside this NameServer, on its port (ControllerConfig keys in the same file).
    enableControllerInNamesrv: bool = False
    # As the broker's: PROM serves /metrics on metricsPromExporterHost (default bindAddress):metricsPromExporterPort.
    metricsExporterType: str = "DISABLE"
    metricsPromExporterHost: str = ""
    metricsPromExporterPort: int = 5557
    # The cluster console in this process (gateway.console): off unless asked for.
    consoleEnable: bool = False
    consolePort: int = 8082
    consoleHost: str = ""  # default: bindAddress (127.0.0.1 when that is every address)
    consoleWritable: bool = False
    consoleAllowRemote: bool = False
    consoleAccessKey: str | None = None
    consoleSecretKey: str | None = None

    def black_listed(self, key: str) -> bool:
        """Whether UPDATE_NAMESRV_CONFIG refuses ``key`` (:func:`~gateway.config.black_listed`); beyond Java's
        fixed keys, the listener (it cannot move while running, and a port changed for the next start would
        take the cluster's NameServer away) and the start-up-only ``startWithCorruptStateFiles`` and ``aclEnable``."""
        return black_listed(key, _FIXED_BLACK_LIST, self.configBlackList)

    def to_properties(self) -> dict[str, str]:
        """Every setting as Java's MixAll.object2Properties gives it: strings, nulls left out; never the
        console's secret key."""
        properties = config_properties(self)
        properties.pop("consoleSecretKey", None)
        return properties

    def console_settings(self, namesrv: str, source: str) -> ConsoleSettings:
        """The console's settings against this NameServer (``namesrv``); ConfigError naming the key and
        ``source``."""
        from gateway.console.settings import ConsoleSettings

        host = self.consoleHost or (self.bindAddress if self.bindAddress not in ("", "0.0.0.0", "::") else "127.0.0.1")
        settings = ConsoleSettings(
            namesrv,
            host=host,
            port=self.consolePort,
            writable=self.consoleWritable,
            allow_remote=self.consoleAllowRemote,
            access_key=self.consoleAccessKey,
            secret_key=self.consoleSecretKey,
        )
        return settings.check(source)


_FIXED_BLACK_LIST = frozenset(
    {
        "configBlackList",
        "configStorePath",
        "kvConfigPath",
        "rocketmqHome",
        "listenPort",
        "bindAddress",
        "startWithCorruptStateFiles",
        "remotingMaxBufferedBytes",
        "aclEnable",
        "metricsExporterType",  # the metrics listener is made at start-up
        "metricsPromExporterHost",
        "metricsPromExporterPort",
        "metricsGrpcExporterTarget",
        "metricsGrpcExporterHeader",
        "metricGrpcExporterTimeOutInMills",
        "metricGrpcExporterIntervalInMills",
        "metricLoggingExporterIntervalInMills",
        "metricsLabel",
        # the console is made at start-up, and its account is not for remote eyes
        "consoleEnable",
        "consolePort",
        "consoleHost",
        "consoleWritable",
        "consoleAllowRemote",
        "consoleAccessKey",
        "consoleSecretKey",
    }
)


def load_namesrv_config(
    path: str | Path | None = None, overrides: dict[str, str] | None = None, defaults: dict[str, str] | None = None
) -> NamesrvConfig:
    """Defaults (``defaults`` over the built-in ones), then the properties file at ``path``, then ``overrides``.

    As ``mqnamesrv -c`` does, the file given becomes ``configStorePath``, where run-time updates go.
    Raises :class:`~gateway.config.ConfigError` naming the key and the file.
    """
    config = NamesrvConfig()
    if defaults:
        apply_properties([config], defaults, "defaults", IGNORED_PREFIXES)
    if path is not None:
        apply_properties([config], load_properties(path), str(path), IGNORED_PREFIXES)
        config.configStorePath = str(path)
    if overrides:
        apply_properties([config], overrides, "overrides", IGNORED_PREFIXES)
    problem = push_config_problem(config)
    if problem is not None:
        source = "overrides" if problem[0] in (overrides or {}) or path is None else str(path)
        raise ConfigError(f"{source}: key {problem[0]}: {problem[1]}")
    if config.consoleEnable:  # its errors at load, naming the file, like every other key's
        config.console_settings("127.0.0.1:9876", str(path) if path is not None else "the settings")
    return config


def update_namesrv_config(config: NamesrvConfig, body: bytes) -> None:
    """UPDATE_NAMESRV_CONFIG: apply a properties body, then persist to ``configStorePath``.

    Raises :class:`~gateway.config.UpdateRefused` (black-listed or unknown key, bad value...), and then
    nothing changes; OSError if the file cannot be written.
    """
    remote_update(body, [config], config.black_listed, "UPDATE_NAMESRV_CONFIG")
    persist_namesrv_config(config)


def persist_namesrv_config(config: NamesrvConfig) -> None:
    """Rewrite ``configStorePath`` with every setting, sorted, keeping the keys it holds that we do not know."""
    rewrite_properties(config.configStorePath, config.to_properties(), sort=True)
