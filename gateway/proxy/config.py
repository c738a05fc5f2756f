"""The proxy's settings under Apache's ProxyConfig names, with its defaults."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field

from gateway.acl.signer import SessionCredentials
from gateway.config import SYSTEM_PROPERTY_PREFIXES, ConfigError, apply_properties, load_properties

# Apache's proxy serves gRPC on 8081 unless told otherwise.
DEFAULT_GRPC_PORT = 8081


@dataclass
class ProxyConfig:
    """ProxyConfig keys the gRPC endpoint uses; attribute names are Apache's."""

    namesrvAddr: str = "127.0.0.1:9876"
    grpcServerPort: int = DEFAULT_GRPC_PORT
    bindAddress: str = "0.0.0.0"
    # Open gRPC connections at most (ours: Apache's proxy has no such bound); one more is closed at once.
    grpcMaxConnections: int = 4096
    # PLAIN ACL: SDK signatures checked against plain_acl.yml under rocketmqHome (as the broker's aclEnable).
    aclEnable: bool = False
    rocketmqHome: str = ""
    # The proxy signs its own requests to brokers with these (a JSON {"accessKey", "secretKey"}) when the
    # brokers check ACL, as Apache's proxy does with enableAclRpcHookForClusterMode.
    enableAclRpcHookForClusterMode: bool = False
    innerClientAuthenticationCredentials: str = ""
    # Limits a message must meet (SendMessageActivity).
    maxMessageSize: int = 4 * 1024 * 1024
    enableMessageBodyEmptyCheck: bool = True
    maxUserPropertySize: int = 16 * 1024
    userPropertyMaxNum: int = 128
    maxMessageGroupSize: int = 64
    maxDelayTimeMills: int = 24 * 3600 * 1000
    maxTransactionRecoverySecond: int = 3600
    enableTopicMessageTypeCheck: bool = True
    sendMessageTimeoutMillis: int = 3000
    # What settings sync tells producers (GrpcClientSettingsManager).
    grpcClientProducerMaxAttempts: int = 3
    grpcClientProducerBackoffInitialMillis: int = 10
    grpcClientProducerBackoffMaxMillis: int = 1000
    grpcClientProducerBackoffMultiplier: int = 2
    # ... and consumers.
    grpcClientConsumerMinLongPollingTimeoutMillis: int = 5000
    grpcClientConsumerMaxLongPollingTimeoutMillis: int = 20000
    grpcClientConsumerLongPollingBatchSize: int = 32
    # Invisible times of popped messages (ReceiveMessage, ChangeInvisibleDuration): a push consumer's (auto
    # renew) gets the default; a simple consumer's must lie between the minimum and the maximum.
    enableProxyAutoRenew: bool = True
    defaultInvisibleTimeMills: int = 60_000
    minInvisibleTimeMillsForRecv: int = 10_000
    maxInvisibleTimeMills: int = 12 * 3600 * 1000
    # Auto renew (gateway.proxy.renew): scan period, how long before its time a message is renewed, renew
    # attempts that failed in a row before giving up, how long a message is renewed at most, when a gone
    # client's messages come back; and (ours) how many messages one client may hold renewed.
    renewSchedulePeriodMillis: int = 5000
    renewAheadTimeMillis: int = 10_000
    maxRenewRetryTimes: int = 3
    renewMaxTimeMillis: int = 3 * 3600 * 1000
    invisibleTimeMillisWhenClear: int = 1000
    maxReceiptHandlesPerClient: int = 10_000
    # A client seen neither by a call nor on its telemetry stream for this long is forgotten (channelExpiredTimeout).
    channelExpiredTimeout: int = 120000
    # Who the proxy is in its metrics, and RocketMQ 5's pull exporter: PROM serves /metrics (gateway.proxy.metrics).
    proxyClusterName: str = "DefaultCluster"
    proxyName: str = field(default_factory=lambda: socket.gethostname() or "DEFAULT_PROXY")
    metricsExporterType: str = "DISABLE"
    metricsPromExporterHost: str = ""  # default: bindAddress
    metricsPromExporterPort: int = 5557


def load_proxy_config(path: str | None = None, overrides: dict[str, str] | None = None) -> ProxyConfig:
    """The defaults, then the file's keys (``tls.*`` and other system properties left to their readers), then
    ``overrides``; raises ConfigError naming the file and key of a bad value."""
    config = ProxyConfig()
    if path:
        apply_properties([config], load_properties(path), path, ignore=SYSTEM_PROPERTY_PREFIXES)
    if overrides:
        apply_properties([config], overrides, "command line", ignore=SYSTEM_PROPERTY_PREFIXES)
    if config.innerClientAuthenticationCredentials:
        try:
            parse_credentials(config.innerClientAuthenticationCredentials)
        except ValueError:
            source = path or "command line"
            raise ConfigError(
                f'{source}: key innerClientAuthenticationCredentials: not a JSON object with "accessKey" and '
                '"secretKey"'
            ) from None
    return config


def parse_credentials(text: str) -> SessionCredentials:
    """``{"accessKey": ..., "secretKey": ...}``; ValueError otherwise."""
    value = json.loads(text)
    if not isinstance(value, dict) or not all(isinstance(value.get(k), str) and value[k] for k in KEYS):
        raise ValueError("not a credentials object")
    return SessionCredentials(value["accessKey"], value["secretKey"])


KEYS = ("accessKey", "secretKey")
