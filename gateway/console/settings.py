"""What the operator chose for a console: the cluster, where it listens, and whether it may act."""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.admin.ext import namesrv_addrs
from gateway.config import ConfigError

if TYPE_CHECKING:
    from gateway.admin.cli import Session

DEFAULT_PORT = 8082


@dataclass
class ConsoleSettings:
    """A console's settings; :meth:`check` says what is wrong with them, naming the key and ``source``."""

    namesrv: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    # ACL off: actions need consoleWritable=true. ACL on (read credentials given): actions need an admin login.
    writable: bool = False
    # Listening on a non-loopback address without ACL is refused unless this is set.
    allow_remote: bool = False
    access_key: str | None = None
    secret_key: str | None = None
    # Charts keep this many hours of 10 s samples in memory.
    history_hours: int = 3
    # Reach the cluster over TLS with this context (mqadmin's --tls options).
    tls: ssl.SSLContext | None = None

    def session(self, access_key: str | None = None, secret_key: str | None = None) -> Session:
        """An mqadmin session to the cluster, signed with the given account (else the console's), over TLS when
        the console was told to."""
        from gateway.admin.cli import Session

        if access_key is None:
            access_key, secret_key = self.access_key, self.secret_key
        return Session(self.namesrv, access_key=access_key, secret_key=secret_key, tls=self.tls)

    @property
    def acl(self) -> bool:
        """Whether the cluster runs ACL: the console was given an account to read it with."""
        return bool(self.access_key and self.secret_key)

    def check(self, source: str = "the command line") -> ConsoleSettings:
        """``self`` when usable; ConfigError naming the key and ``source`` otherwise."""
        try:
            namesrv_addrs(self.namesrv)
        except ValueError as e:
            raise ConfigError(f"namesrvAddr in {source}: {e}") from None
        if not 0 <= self.port < 65536:
            raise ConfigError(f"consolePort in {source}: {self.port} is not a port (0 to 65535)")
        if bool(self.access_key) != bool(self.secret_key):
            raise ConfigError(f"consoleAccessKey/consoleSecretKey in {source}: give both or neither")
        if not 1 <= self.history_hours <= 48:
            raise ConfigError(f"consoleHistoryHours in {source}: {self.history_hours} is not 1 to 48")
        if not self.acl and not self.allow_remote and not _loopback(self.host):
            raise ConfigError(
                f"consoleHost in {source}: {self.host} is not a loopback address and the cluster has no ACL "
                "(give an account, or set consoleAllowRemote=true to serve it anyway)"
            )
        return self


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
