"""The ACL requests of mqadmin (AdminBrokerProcessor's ACL part): accounts, global white addresses, versions.

``updateAclConfig`` (50), ``deleteAccessConfig`` (51), ``clusterAclConfigVersion`` (52),
``updateGlobalWhiteAddr`` (53), and GET_BROKER_CLUSTER_ACL_CONFIG (54) of the 4.7 to 4.9.0 admin API.
Changes are written to the ACL file and take effect at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twisted.logger import Logger

from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import CommandHeader, wire

from .permission import AclError
from .plain_permission_manager import PlainAccessConfig, PlainPermissionManager, java_split

if TYPE_CHECKING:
    from gateway.broker.config import BrokerConfig
    from gateway.remoting.protocol import RemotingProtocol

log = Logger()


@dataclass(slots=True)
class CreateAccessConfigRequestHeader(CommandHeader):
    access_key: str | None = wire("accessKey")
    secret_key: str | None = wire("secretKey")
    white_remote_address: str | None = wire("whiteRemoteAddress")
    admin: bool = wire("admin", bool, default=False)
    default_topic_perm: str | None = wire("defaultTopicPerm")
    default_group_perm: str | None = wire("defaultGroupPerm")
    topic_perms: str | None = wire("topicPerms")
    group_perms: str | None = wire("groupPerms")


@dataclass(slots=True)
class DeleteAccessConfigRequestHeader(CommandHeader):
    access_key: str | None = wire("accessKey")


@dataclass(slots=True)
class UpdateGlobalWhiteAddrsConfigRequestHeader(CommandHeader):
    global_white_addrs: str | None = wire("globalWhiteAddrs")
    acl_file_full_path: str | None = wire("aclFileFullPath")


@dataclass(slots=True)
class GetBrokerAclConfigResponseHeader(CommandHeader):
    version: str = wire("version", required=True)
    all_acl_file_version: str = wire("allAclFileVersion")
    broker_name: str = wire("brokerName", required=True)
    broker_addr: str = wire("brokerAddr", required=True)
    cluster_name: str = wire("clusterName", required=True)


# PlainAccessConfig's fields, in fastjson's (alphabetical) order.
_ACCOUNT_KEYS = (
    "accessKey",
    "admin",
    "defaultGroupPerm",
    "defaultTopicPerm",
    "groupPerms",
    "secretKey",
    "topicPerms",
    "whiteRemoteAddress",
)


class AclAdminProcessor:
    """Handlers for the ACL admin codes of one broker."""

    def __init__(self, manager: PlainPermissionManager, config: BrokerConfig) -> None:
        self.manager = manager
        self.config = config

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.UPDATE_AND_CREATE_ACL_CONFIG: self.update_and_create_access_config,
            RequestCode.DELETE_ACL_CONFIG: self.delete_access_config,
            RequestCode.GET_BROKER_CLUSTER_ACL_INFO: self.get_broker_acl_config_version,
            RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: self.update_global_white_addrs_config,
            RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG: self.get_broker_cluster_acl_config,
        }

    def update_and_create_access_config(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        h = CreateAccessConfigRequestHeader.decode(request.ext_fields)
        config = PlainAccessConfig(
            access_key=h.access_key,
            secret_key=h.secret_key,
            white_remote_address=h.white_remote_address,
            admin=h.admin,
            default_topic_perm=h.default_topic_perm,
            default_group_perm=h.default_group_perm,
            topic_perms=java_split(h.topic_perms),
            group_perms=java_split(h.group_perms),
        )
        try:
            self.manager.update_access_config(config)
        except AclError as e:
            return request.response(ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED, str(e))
        log.info("ACL account {key} updated by {peer}", key=h.access_key, peer=channel.peer)
        return request.response()

    def delete_access_config(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        access_key = DeleteAccessConfigRequestHeader.decode(request.ext_fields).access_key
        try:
            deleted = self.manager.delete_access_config(access_key)
        except AclError as e:
            return request.response(ResponseCode.DELETE_ACL_CONFIG_FAILED, str(e))
        if not deleted:
            return request.response(
                ResponseCode.DELETE_ACL_CONFIG_FAILED,
                f"The accesskey[{access_key}] corresponding to accessConfig has been deleted failed.",
            )
        log.info("ACL account {key} deleted by {peer}", key=access_key, peer=channel.peer)
        return request.response()

    def update_global_white_addrs_config(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        h = UpdateGlobalWhiteAddrsConfigRequestHeader.decode(request.ext_fields)
        try:
            updated = self.manager.update_global_white_addrs(java_split(h.global_white_addrs), h.acl_file_full_path)
        except AclError as e:
            return request.response(ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED, str(e))
        if not updated:
            return request.response(
                ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
                f"The globalWhiteAddresses[{h.global_white_addrs}] has been updated failed.",
            )
        log.info("ACL global white addresses set to {addrs} by {peer}", addrs=h.global_white_addrs, peer=channel.peer)
        return request.response()

    def get_broker_acl_config_version(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        snapshot = self.manager.snapshot
        default_version = snapshot.data_versions.get(self.manager.default_acl_file)
        header = GetBrokerAclConfigResponseHeader(
            version=fastjson.dumps(default_version).decode() if default_version else "{}",
            all_acl_file_version=fastjson.dumps(dict(snapshot.data_versions)).decode(),
            broker_name=self.config.brokerName,
            broker_addr=self.config.broker_addr,
            cluster_name=self.config.brokerClusterName,
        )
        return request.response(ext_fields=header.encode())

    def get_broker_cluster_acl_config(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        white, accounts = self.manager.all_acl_config()
        configs = [{k: _plain(entry.get(k)) for k in _ACCOUNT_KEYS if entry.get(k) is not None} for entry in accounts]
        return request.response(body=fastjson.dumps({"globalWhiteAddrs": white, "plainAccessConfigs": configs}))


def _plain(value: object) -> object:
    # PlainAccessConfig's fields are strings, lists of strings and the admin flag.
    if isinstance(value, bool):
        return value
    if isinstance(value, list):
        return [str(v) for v in value]
    return str(value)


_ACL_OFF = "ACL is not enabled on this broker (aclEnable=false)"


def acl_disabled_handlers() -> dict[int, Any]:
    """The ACL admin codes on a broker without ACL. Apache 4.9.8 answers them with their *_FAILED codes (and
    a null remark, from a NullPointerException), and GET_BROKER_CLUSTER_ACL_INFO not at all; here each gets
    its failure code and says why at once."""

    def refuse(code: int) -> Any:
        return lambda _channel, request: request.response(code, _ACL_OFF)

    return {
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG: refuse(ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED),
        RequestCode.DELETE_ACL_CONFIG: refuse(ResponseCode.DELETE_ACL_CONFIG_FAILED),
        RequestCode.GET_BROKER_CLUSTER_ACL_INFO: refuse(ResponseCode.SYSTEM_ERROR),
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: refuse(ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED),
    }
