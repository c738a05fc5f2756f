"""UPDATE_BROKER_CONFIG (25): change the running broker's settings (AdminBrokerProcessor.updateBrokerConfig).

GET_BROKER_CONFIG stays with the admin processor. As in Java there is no slave check: ``mqadmin
updateBrokerConfig -c`` updates slaves too. ACL classifies the request as an admin one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from twisted.logger import Logger

from gateway.config import (
    ConfigError,
    UpdateRefused,
    black_listed,
    remote_update,
)
from gateway.persist import rewrite_properties
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

from ..config import SECRET_KEYS

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController

log = Logger()

# AdminBrokerProcessor.initConfigBlackList's fixed keys; the listener: it cannot move while running, and the
# address registered with the NameServers is built from it, so a change would send clients to a dead port; and
# the start-up-only settings (a remote change would only surprise the next start).
FIXED_BLACK_LIST = frozenset(
    {
        "brokerConfigPath",
        "rocketmqHome",
        "configBlackList",
        "listenPort",
        "bindAddress",
        "haListenPort",
        "startWithCorruptStateFiles",
        "remotingMaxBufferedBytes",
        "registerNameServerPeriodMin",
        "maxOpenMappedFiles",
        "metricsExporterType",  # the metrics listener, like the remoting one, is made at start-up
        "metricsPromExporterHost",
        "metricsPromExporterPort",
        "metricsGrpcExporterTarget",  # the push is set up at start-up too
        "metricsGrpcExporterHeader",
        "metricGrpcExporterTimeOutInMills",
        "metricGrpcExporterIntervalInMills",
        "metricLoggingExporterIntervalInMills",
        "metricsLabel",
        "clusterConsoleUrl",  # a link on the broker's pages: checked when broker.conf is read, not settable remotely
    }
    | SECRET_KEYS
)


class BrokerConfigProcessor:
    """Applies a properties body to BrokerConfig and StoreConfig at once and persists it to ``brokerConfigPath``."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.UPDATE_BROKER_CONFIG: self.update_broker_config}

    def black_listed(self, key: str) -> bool:
        """Java's black list (its fixed keys and ``configBlackList``), every key naming a path, a program or a
        system property (:func:`~gateway.config.black_listed`), the listener and ``startWithCorruptStateFiles``."""
        return black_listed(key, FIXED_BLACK_LIST, self.broker.config.configBlackList)

    def update_broker_config(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        """Refusals change nothing (see :func:`gateway.config.remote_update`); a new ``brokerPermission`` is
        registered with the NameServers at once, as Java does."""
        broker = self.broker
        log.info("Broker receive request to update config, caller address={peer}", peer=channel.peer)
        if not request.body:
            return request.response()
        try:
            changed = remote_update(
                request.body, [broker.config, broker.store_config], self.black_listed, "UPDATE_BROKER_CONFIG"
            )
        except UpdateRefused as e:
            return request.response(e.code, e.remark)
        log.info("updateBrokerConfig, new config: [{changed}] client: {peer}", changed=changed, peer=channel.peer)
        if "brokerPermission" in changed:
            broker.topics.data_version.next_version()
            broker.registration.register_all()
        path = broker.config.brokerConfigPath
        if path:
            try:
                persist_broker_config(path, changed)
            except (OSError, ConfigError) as e:
                log.error("persist {path} failed: {error}", path=path, error=e)
                return request.response(ResponseCode.SYSTEM_ERROR, "config updated but not persisted")
        return request.response()


def persist_broker_config(path: str | Path, changed: dict[str, str]) -> None:
    """Rewrite the broker's config file with ``changed`` over the keys it holds, escaped as Java's
    ``Properties.store`` escapes (a value can never add a key); only keys a client changed are added."""
    rewrite_properties(path, changed)
