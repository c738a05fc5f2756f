"""Name server settings under RocketMQ's own namesrv.properties keys (NamesrvConfig + NettyServerConfig).

Java's Configuration keeps every setting in one properties view: GET_NAMESRV_CONFIG returns it,
UPDATE_NAMESRV_CONFIG changes it at run time and rewrites ``configStorePath``.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from gateway.config import apply_properties, load_properties
from gateway.persist import write_atomically

# Keys another part of the program reads (TLS has its own issue).
IGNORED_PREFIXES = ("tls.",)


def _home_file(name: str) -> str:
    return str(Path.home() / "namesrv" / name)


@dataclass
class NamesrvConfig:
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

    def black_list(self) -> set[str]:
        """Keys that UPDATE_NAMESRV_CONFIG refuses (DefaultRequestProcessor's fixed ones included)."""
        fixed = {"configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome"}
        return fixed | {k.strip() for k in self.configBlackList.split(";") if k.strip()}

    def to_properties(self) -> dict[str, str]:
        """Every setting as Java's MixAll.object2Properties gives it: strings, nulls left out."""
        out = {}
        for key, value in asdict(self).items():
            if value is None:
                continue
            out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


def format_properties(props: dict[str, str]) -> str:
    """``key=value`` lines (MixAll.properties2String), sorted for a stable output."""
    return "".join(f"{k}={v}\n" for k, v in sorted(props.items()))


def load_namesrv_config(path: str | Path | None = None, overrides: dict[str, str] | None = None) -> NamesrvConfig:
    """Defaults, then the properties file at ``path``, then ``overrides``.

    As ``mqnamesrv -c`` does, the file given becomes ``configStorePath``, where run-time updates go.
    Raises :class:`~gateway.config.ConfigError` naming the key and the file.
    """
    config = NamesrvConfig()
    if path is not None:
        apply_properties([config], load_properties(path), str(path), IGNORED_PREFIXES)
        config.configStorePath = str(path)
    if overrides:
        apply_properties([config], overrides, "overrides", IGNORED_PREFIXES)
    return config


def update_namesrv_config(config: NamesrvConfig, props: dict[str, str]) -> None:
    """UPDATE_NAMESRV_CONFIG: apply ``props``, then persist to ``configStorePath``.

    Raises ConfigError for a bad value, and then nothing changes. Black-listed keys are the caller's check.
    """
    # Convert on a copy so one bad value leaves the running config untouched.
    candidate = replace(config)
    apply_properties([candidate], props, "UPDATE_NAMESRV_CONFIG", IGNORED_PREFIXES)
    for f in fields(config):
        setattr(config, f.name, getattr(candidate, f.name))
    persist_namesrv_config(config)


def persist_namesrv_config(config: NamesrvConfig) -> None:
    """Rewrite ``configStorePath`` with every setting, keeping the keys it holds that we do not know (tls.*)."""
    path = Path(config.configStorePath)
    props = load_properties(path) if path.exists() else {}
    props.update(config.to_properties())
    write_atomically(path, format_properties(props).encode())
