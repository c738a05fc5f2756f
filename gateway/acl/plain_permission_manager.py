"""PlainPermissionManager: plain_acl.yml and its siblings loaded, checked against requests, updated, reloaded.

Files, as RocketMQ 4.9 finds them: every ``*.yml``/``*.yaml`` under ``$ROCKETMQ_HOME/conf/acl/`` (sorted),
then ``$ROCKETMQ_HOME/conf/plain_acl.yml`` (``rocketmq.acl.plain.file`` names another, relative to
the home; an absolute path is taken as is). An access key defined twice keeps its first definition.

A file that changes is reloaded (with all the others) on the next poll. If any file cannot be used
the last good configuration stays in force and the error is logged. Admin requests rewrite a file in
place (keeping its other keys), bump its ``dataVersion`` and reload.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twisted.logger import Logger

from gateway.config import ConfigError
from gateway.file_watch import FileWatchService
from gateway.persist import write_atomically
from gateway.remoting.bodies import DataVersion

from .permission import (
    ADMIN_CODES,
    PUB,
    AclError,
    check_permission,
    check_resource_perms,
    describe,
    is_retry_topic,
    parse_perm,
    parse_resource_perms,
)
from .remote_address import MatchCache, RemoteAddressStrategy, remote_address_strategy
from .signer import ACCESS_KEY, SIGNATURE, AclSigner, request_content

log = Logger()

# The Java system properties that place the files.
HOME_PROPERTY = "rocketmq.home.dir"
PLAIN_FILE_PROPERTY = "rocketmq.acl.plain.file"
DEFAULT_PLAIN_FILE = "conf/plain_acl.yml"
ACL_DIR = "conf/acl"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
# Java polls every 5 s; a stat per file is cheap enough to look every second.
WATCH_INTERVAL = 1.0

# The Java frames Apache 4.9.8 names in its denials (RemotingHelper.exceptionSimpleDesc).
_VALIDATE = "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:{})"
_CHECK_PERM = "org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java:{})"


class AccessDenied(AclError):
    """A request the ACL refuses; ``remark`` is what Apache's broker answers (code 1, SYSTEM_ERROR)."""

    def __init__(self, message: str, frame: str) -> None:
        super().__init__(message)
        self.remark = f"org.apache.rocketmq.acl.common.AclException: {message}, {frame}"


def _text(value: object) -> str | None:
    # YAML may type a key as a number; Java converts it to its string form.
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _flag(value: object) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


@dataclass(frozen=True, slots=True)
class PlainAccessAccount:
    """One account of plain_acl.yml as the broker checks it (Java's owned PlainAccessResource)."""

    access_key: str
    secret_key: str = field(repr=False)
    white_remote_address: str | None
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    # topic -> perm and %RETRY%group -> perm
    resource_perms: Mapping[str, int]
    white_address: RemoteAddressStrategy = field(repr=False, compare=False)
    signer: AclSigner = field(repr=False, compare=False)

    @classmethod
    def from_yaml(cls, entry: object) -> PlainAccessAccount:
        """Build from one ``accounts`` entry; raises AclError with Java's messages."""
        if not isinstance(entry, Mapping):
            raise AclError(f"an account must be a mapping, not {entry!r}")
        access_key, secret_key = _text(entry.get("accessKey")), _text(entry.get("secretKey"))
        check_key_lengths(access_key, secret_key)
        assert access_key is not None and secret_key is not None
        white = _text(entry.get("whiteRemoteAddress"))
        perms = parse_resource_perms(_list(entry.get("groupPerms"), "groupPerms"), is_topic=False)
        perms.update(parse_resource_perms(_list(entry.get("topicPerms"), "topicPerms"), is_topic=True))
        return cls(
            access_key=access_key,
            secret_key=secret_key,
            white_remote_address=white,
            admin=_flag(entry.get("admin")),
            default_topic_perm=parse_perm(entry.get("defaultTopicPerm")),
            default_group_perm=parse_perm(entry.get("defaultGroupPerm")),
            resource_perms=perms,
            white_address=MatchCache(remote_address_strategy(white)),
            signer=AclSigner(secret_key),
        )


def check_key_lengths(access_key: str | None, secret_key: str | None) -> None:
    """PlainPermissionManager.checkPlainAccessConfig."""
    if access_key is None or secret_key is None or len(access_key) <= 6 or len(secret_key) <= 6:
        raise AclError(
            f"The accessKey={access_key} and secretKey={secret_key} cannot be null and length should longer than 6"
        )


def _list(value: object, key: str) -> list[object] | None:
    if value is None or isinstance(value, list):
        return value
    raise AclError(f"{key} must be a list, not {value!r}")


@dataclass(frozen=True)
class PlainAclSnapshot:
    """Everything the ACL files said at one load; replaced whole, never changed."""

    files: tuple[str, ...] = ()
    accounts: Mapping[str, PlainAccessAccount] = field(default_factory=dict)
    # access key -> the file that defines it
    account_files: Mapping[str, str] = field(default_factory=dict)
    global_white_addresses: tuple[RemoteAddressStrategy, ...] = ()
    data_versions: Mapping[str, DataVersion] = field(default_factory=dict)
    globally_white: RemoteAddressStrategy = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        patterns = self.global_white_addresses
        object.__setattr__(self, "globally_white", MatchCache(lambda addr: any(m(addr) for m in patterns)))


def read_yaml(path: str) -> dict[str, Any] | None:
    """A YAML file's top-level mapping; None for a missing or empty file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise AclError(f"cannot read {path}: {e.strerror}") from None
    import yaml  # only a broker with ACL files reads YAML

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise AclError(f"{path} is not valid YAML: {e}") from None
    if data is None:
        return None
    if not isinstance(data, dict):
        raise AclError(f"{path} must hold a mapping")
    return data


def load_snapshot(files: Iterable[str]) -> PlainAclSnapshot:
    """Parse every file; raises AclError naming the file that cannot be used."""
    accounts: dict[str, PlainAccessAccount] = {}
    account_files: dict[str, str] = {}
    white: list[RemoteAddressStrategy] = []
    versions: dict[str, DataVersion] = {}
    files = tuple(files)
    for path in files:
        data = read_yaml(path)
        if not data:
            log.warn("No data in ACL file {path}", path=path)
            continue
        try:
            for pattern in _list(data.get("globalWhiteRemoteAddresses"), "globalWhiteRemoteAddresses") or ():
                white.append(remote_address_strategy(pattern))
            for entry in _list(data.get("accounts"), "accounts") or ():
                account = PlainAccessAccount.from_yaml(entry)
                if account.access_key in accounts:
                    log.warn("The accessKey {key} is repeated in ACL files", key=account.access_key)
                    continue
                accounts[account.access_key] = account
                account_files[account.access_key] = path
            stamps = _list(data.get("dataVersion"), "dataVersion")
            versions[path] = DataVersion.from_json(stamps[0]) if stamps else DataVersion()
        except (AclError, ValueError, TypeError, AttributeError) as e:
            raise AclError(f"{path}: {e}") from None
    return PlainAclSnapshot(files, accounts, account_files, tuple(white), versions)


def java_split(text: str | None, sep: str = ",") -> list[str] | None:
    """UtilAll.split (Java's String.split): None stays None, trailing empty items are dropped."""
    if text is None:
        return None
    if text == "":
        return [""]
    items = text.split(sep)
    while items and items[-1] == "":
        items.pop()
    return items


@dataclass
class PlainAccessConfig:
    """An account as UPDATE_AND_CREATE_ACL_CONFIG carries it (None: leave the file's value)."""

    access_key: str | None
    secret_key: str | None = None
    white_remote_address: str | None = None
    admin: bool = False
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: list[str] | None = None
    group_perms: list[str] | None = None

    def merged_into(self, entry: dict[str, Any] | None) -> dict[str, Any]:
        """createAclAccessConfigMap: the file's account mapping updated with what this config sets."""
        out = dict(entry or {})
        out["accessKey"] = self.access_key
        if self.secret_key:
            out["secretKey"] = self.secret_key
        if self.white_remote_address is not None:
            out["whiteRemoteAddress"] = self.white_remote_address
        out["admin"] = self.admin
        if self.default_topic_perm:
            out["defaultTopicPerm"] = self.default_topic_perm
        if self.default_group_perm:
            out["defaultGroupPerm"] = self.default_group_perm
        if self.topic_perms is not None:
            out["topicPerms"] = list(self.topic_perms)
        if self.group_perms is not None:
            out["groupPerms"] = list(self.group_perms)
        return out


class PlainPermissionManager:
    """The broker's ACL state: current snapshot, validation, admin updates and the file watch."""

    def __init__(
        self,
        home: str | None,
        plain_file: str | None = None,
        *,
        clock: Any = None,
        watch_interval: float = WATCH_INTERVAL,
    ) -> None:
        plain_file = plain_file or DEFAULT_PLAIN_FILE
        if not os.path.isabs(plain_file) and not home:
            raise ConfigError("aclEnable=true needs rocketmqHome or ROCKETMQ_HOME to find plain_acl.yml")
        self.home = os.path.normpath(home) if home else None
        self.default_acl_file = os.path.normpath(os.path.join(home or "", plain_file))
        self.acl_dir = os.path.join(self.home, ACL_DIR) if self.home else None
        self._ensure_default_file()
        try:
            self.snapshot = load_snapshot(self.acl_files())
        except AclError as e:
            raise ConfigError(f"ACL configuration: {e}") from None
        self._watch = FileWatchService(self.acl_files, self._files_changed, watch_interval, clock)
        self.reload_listeners: list[Callable[[PlainAclSnapshot], None]] = []

    @classmethod
    def for_server(
        cls, rocketmq_home: str | None, system_properties: Mapping[str, str] | None, clock: Any
    ) -> PlainPermissionManager:
        """A broker's or NameServer's files: under its ``rocketmqHome`` setting, else ``rocketmq.home.dir``,
        else ``$ROCKETMQ_HOME``; ``rocketmq.acl.plain.file`` names the default file.

        Raises :class:`~gateway.config.ConfigError` when they cannot be found or loaded.
        """
        props = system_properties or {}
        home = rocketmq_home or props.get(HOME_PROPERTY) or os.environ.get("ROCKETMQ_HOME")
        return cls(home, props.get(PLAIN_FILE_PROPERTY), clock=clock)

    # -- files

    def _ensure_default_file(self) -> None:
        # Java creates an empty default file, where accounts added remotely go.
        path = Path(self.default_acl_file)
        if not path.exists():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
            except OSError as e:
                raise ConfigError(f"cannot create ACL file {path}: {e.strerror}") from None

    def acl_files(self) -> list[str]:
        """``conf/acl/**/*.yml|yaml`` (sorted), then the default file."""
        found: list[str] = []
        if self.acl_dir and os.path.isdir(self.acl_dir):
            for root, dirs, names in os.walk(self.acl_dir):
                dirs.sort()
                for name in sorted(names):
                    if name.endswith((".yml", ".yaml")) and not (root == self.acl_dir and name == "tools.yml"):
                        found.append(os.path.join(root, name))
        if os.path.exists(self.default_acl_file) and self.default_acl_file not in found:
            found.append(self.default_acl_file)
        return found

    def start(self) -> None:
        self._watch.start()

    def stop(self) -> None:
        self._watch.stop()

    def _files_changed(self, paths: list[str]) -> None:
        log.info("ACL files changed: {paths}", paths=", ".join(paths))
        self.reload()

    def reload(self) -> bool:
        """Load every file again; if one cannot be used, keep the last good configuration and log why."""
        try:
            snapshot = load_snapshot(self.acl_files())
        except AclError as e:
            log.error("ACL configuration not reloaded, the previous one stays in force: {error}", error=e)
            return False
        self.snapshot = snapshot
        log.info("ACL configuration loaded: {n} accounts from {files}", n=len(snapshot.accounts), files=snapshot.files)
        for listener in self.reload_listeners:
            listener(snapshot)
        return True

    # -- checking requests

    def validate(
        self,
        remote_addr: str,
        code: int,
        ext: Mapping[str, str] | None,
        body: bytes,
        resources: Mapping[str, int],
        needs_admin: bool | None = None,
    ) -> None:
        """PlainPermissionManager.validate: global whitelist, account, its whitelist, signature, permissions.

        ``needs_admin`` None: as :data:`~gateway.acl.permission.ADMIN_CODES` says for ``code``.
        Raises :class:`AccessDenied` with Apache's message.
        """
        acl = self.snapshot
        if acl.globally_white(remote_addr):
            return
        access_key = ext.get(ACCESS_KEY) if ext else None
        if access_key is None:
            raise AccessDenied("No accessKey is configured", _VALIDATE.format(664))
        account = acl.accounts.get(access_key)
        if account is None:
            raise AccessDenied(f"No acl config for {access_key}", _VALIDATE.format(668))
        if account.white_address(remote_addr):
            return
        assert ext is not None
        if not _signed_by(account, ext, body):
            raise AccessDenied(f"Check signature failed for accessKey={access_key}", _VALIDATE.format(684))
        # Message traces may always be written.
        if resources.get(TRACE_TOPIC) == PUB:
            return
        check_perm(code, resources, account, code in ADMIN_CODES if needs_admin is None else needs_admin)

    # -- admin requests

    def update_access_config(self, config: PlainAccessConfig) -> None:
        """Add or change an account (in the file that defines it, else the default file); raises AclError."""
        check_key_lengths(config.access_key, config.secret_key)
        check_resource_perms(config.topic_perms)
        check_resource_perms(config.group_perms)
        assert config.access_key is not None
        path = self.snapshot.account_files.get(config.access_key, self.default_acl_file)
        data = read_yaml(path) or {}
        accounts = [a for a in data.get("accounts") or [] if isinstance(a, dict)]
        old = next((a for a in accounts if _text(a.get("accessKey")) == config.access_key), None)
        entry = config.merged_into(old)
        PlainAccessAccount.from_yaml(entry)  # refuse what the broker could not load back
        if old is not None:
            accounts.remove(old)
        accounts.append(entry)
        data["accounts"] = accounts
        self._write(path, data)

    def delete_access_config(self, access_key: str | None) -> bool:
        """Remove an account from its file; False if there is no such account."""
        path = self.snapshot.account_files.get(access_key or "")
        if not access_key or path is None:
            return False
        data = read_yaml(path)
        if not data:
            return True
        accounts = data.get("accounts") or []
        kept = [a for a in accounts if not (isinstance(a, dict) and _text(a.get("accessKey")) == access_key)]
        if len(kept) == len(accounts):
            return False
        data["accounts"] = kept
        self._write(path, data)
        return True

    def update_global_white_addrs(self, addresses: list[str] | None, path: str | None = None) -> bool:
        """Replace ``globalWhiteRemoteAddresses`` of one ACL file (default: plain_acl.yml)."""
        target = os.path.normpath(path) if path else self.default_acl_file
        if addresses is None or target not in self.acl_files():
            log.error("refusing to write global white addresses to {path}: not an ACL file", path=target)
            return False
        for pattern in addresses:
            remote_address_strategy(pattern)
        data = read_yaml(target) or {}
        data["globalWhiteRemoteAddresses"] = list(addresses)
        self._write(target, data)
        return True

    def _write(self, path: str, data: dict[str, Any]) -> None:
        """Write with the next dataVersion (AclUtils.writeDataObject), then load what was written."""
        stamps = data.get("dataVersion")
        version = DataVersion.from_json(stamps[0]) if isinstance(stamps, list) and stamps else DataVersion()
        version.next_version()
        data["dataVersion"] = [{"counter": version.counter, "timestamp": version.timestamp}]
        mode = os.stat(path).st_mode & 0o777 if os.path.exists(path) else 0o600
        import yaml

        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
        write_atomically(path, text.encode("utf-8"))
        os.chmod(path, mode)
        if not self.reload():
            raise AclError(f"{path} was written but the ACL files do not load; see the broker log")

    def all_acl_config(self) -> tuple[list[str], list[dict[str, Any]]]:
        """Every file's global white addresses and accounts, as the files hold them (getAllAclConfig)."""
        white: list[str] = []
        accounts: list[dict[str, Any]] = []
        seen: set[str] = set()
        for path in self.snapshot.files:
            data = read_yaml(path) or {}
            white.extend(str(a) for a in data.get("globalWhiteRemoteAddresses") or [])
            for entry in data.get("accounts") or []:
                key = _text(entry.get("accessKey")) if isinstance(entry, dict) else None
                if key is not None and key not in seen:
                    seen.add(key)
                    accounts.append(entry)
        return white, accounts


def _signed_by(account: PlainAccessAccount, ext: Mapping[str, str], body: bytes) -> bool:
    given = ext.get(SIGNATURE, "").encode("utf-8", "replace")

    def matches(content: bytes) -> bool:
        return hmac.compare_digest(account.signer.signature(content, body).encode("ascii"), given)

    # Brokers 4.9.x leave _UNIQUE_KEY_QUERY out of the signed text, 4.9.x clients sign it: accept both.
    if matches(request_content(ext, (UNIQUE_KEY_QUERY,))):
        return True
    return UNIQUE_KEY_QUERY in ext and matches(request_content(ext))


def check_perm(code: int, needed: Mapping[str, int], account: PlainAccessAccount, needs_admin: bool) -> None:
    """PlainPermissionManager.checkPerm: admin-only requests, then each needed resource."""
    if needs_admin and not account.admin:
        raise AccessDenied(
            f"Need admin permission for request code={code}, but accessKey={account.access_key} is not",
            _CHECK_PERM.format(581),
        )
    owned = account.resource_perms
    if not needed or (not owned and account.admin):
        return
    for resource, perm in needed.items():
        granted = owned.get(resource)
        if granted is None:
            default = account.default_group_perm if is_retry_topic(resource) else account.default_topic_perm
            if not check_permission(perm, default):
                raise AccessDenied(f"No default permission for {describe(resource)}", _CHECK_PERM.format(606))
        elif not check_permission(perm, granted):
            raise AccessDenied(f"No default permission for {describe(resource)}", _CHECK_PERM.format(611))
