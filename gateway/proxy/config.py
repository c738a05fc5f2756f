"""The proxy's settings under Apache's ProxyConfig names, with its defaults."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import SYSTEM_PROPERTY_PREFIXES, apply_properties, load_properties

# Apache's proxy serves gRPC on 8081 unless told otherwise.
DEFAULT_GRPC_PORT = 8081


@dataclass
class ProxyConfig:
    """ProxyConfig keys the gRPC endpoint uses; attribute names are Apache's."""

    namesrvAddr: str = "127.0.0.1:9876"
    grpcServerPort: int = DEFAULT_GRPC_PORT
    bindAddress: str = "0.0.0.0"
    # PLAIN ACL: SDK signatures checked against plain_acl.yml under rocketmqHome (as the broker's aclEnable).
    aclEnable: bool = False
    rocketmqHome: str = ""
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
    # A client seen neither by a call nor on its telemetry stream for this long is forgotten (channelExpiredTimeout).
    channelExpiredTimeout: int = 120000


def load_proxy_config(path: str | None = None, overrides: dict[str, str] | None = None) -> ProxyConfig:
    """The defaults, then the file's keys (``tls.*`` and other system properties left to their readers), then
    ``overrides``; raises ConfigError naming the file and key of a bad value."""
    config = ProxyConfig()
    if path:
        apply_properties([config], load_properties(path), path, ignore=SYSTEM_PROPERTY_PREFIXES)
    if overrides:
        apply_properties([config], overrides, "command line", ignore=SYSTEM_PROPERTY_PREFIXES)
    return config
