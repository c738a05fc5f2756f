"""Controller settings under RocketMQ 5's ControllerConfig keys (controller.properties, or namesrv.properties
with ``enableControllerInNamesrv=true``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gateway.config import (
    ConfigError,
    apply_properties,
    black_listed,
    config_properties,
    load_properties,
    remote_update,
)
from gateway.persist import rewrite_properties


@dataclass
class ControllerConfig:
    """Attribute names are the properties keys; times are milliseconds."""

    # The Raft group: ``id-host:port`` per controller, ';'-separated, and which of them this one is. The
    # addresses are the Raft ones (PySyncObj here, DLedger in Apache), not the remoting port brokers use.
    controllerDLegerGroup: str = "group1"
    controllerDLegerPeers: str = "n0-127.0.0.1:9877"
    controllerDLegerSelfId: str = "n0"
    controllerStorePath: str = field(default_factory=lambda: str(Path.home() / "DledgerController"))
    scanNotActiveBrokerInterval: int = 5000
    enableElectUncleanMaster: bool = False
    notifyBrokerRoleChanged: bool = True
    # The remoting listener of a standalone controller (NettyServerConfig); embedded, the NameServer's.
    listenPort: int = 9878
    bindAddress: str = "0.0.0.0"
    # Where UPDATE_CONTROLLER_CONFIG persists (the -c file of a standalone controller); none when empty.
    configStorePath: str = ""
    # Keys UPDATE_CONTROLLER_CONFIG refuses, ';'-separated (paths, programs and tls.* always).
    configBlackList: str = "configBlackList;configStorePath"

    @property
    def peers(self) -> dict[str, str]:
        """Raft peer id → ``host:port``."""
        out = {}
        for entry in self.controllerDLegerPeers.split(";"):
            entry = entry.strip()
            if entry:
                peer_id, sep, addr = entry.partition("-")
                if not sep or ":" not in addr:
                    raise ConfigError(f"key controllerDLegerPeers: {entry!r} is not id-host:port")
                out[peer_id] = addr
        return out

    @property
    def self_addr(self) -> str:
        try:
            return self.peers[self.controllerDLegerSelfId]
        except KeyError:
            raise ConfigError(
                f"key controllerDLegerSelfId: {self.controllerDLegerSelfId!r} is not in controllerDLegerPeers"
            ) from None


# The Raft group and the listener cannot change while running.
_FIXED_BLACK_LIST = frozenset(
    {
        "controllerDLegerGroup",
        "controllerDLegerPeers",
        "controllerDLegerSelfId",
        "scanNotActiveBrokerInterval",
        "listenPort",
        "bindAddress",
    }
)


def update_controller_config(config: ControllerConfig, body: bytes) -> None:
    """UPDATE_CONTROLLER_CONFIG: apply a properties body and persist it to ``configStorePath`` if set.

    Raises :class:`~gateway.config.UpdateRefused` (black-listed or unknown key, bad value) and then nothing
    changes; OSError if the file cannot be written.
    """
    remote_update(
        body,
        [config],
        lambda key: black_listed(key, _FIXED_BLACK_LIST, config.configBlackList),
        "UPDATE_CONTROLLER_CONFIG",
    )
    if config.configStorePath:
        rewrite_properties(config.configStorePath, config_properties(config), sort=True)


def load_controller_config(
    path: str | None = None, overrides: dict[str, str] | None = None, ignore: tuple[str, ...] = ("tls.",)
) -> ControllerConfig:
    """Read ``path`` (if given) then ``overrides``; errors name the key and the file."""
    config = ControllerConfig()
    if path:
        apply_properties([config], load_properties(path), path, ignore=ignore)
        config.configStorePath = config.configStorePath or path
    if overrides:
        apply_properties([config], overrides, "command line", ignore=ignore)
    try:
        _ = config.self_addr
    except ConfigError as e:
        raise ConfigError(f"{path or 'command line'}: {e}") from None
    return config
