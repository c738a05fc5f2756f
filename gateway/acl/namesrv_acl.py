"""The NameServer's ACL when ``aclEnable=true`` in namesrv.properties (ours: Apache 4.9's NameServer has none).

The same files as the broker's (plain_acl.yml under ``rocketmqHome`` or ``$ROCKETMQ_HOME``, ``conf/acl/*.yml``,
``rocketmq.acl.plain.file``), reloaded when they change, and the same signature, so mqadmin's and the Java
client's AclClientRPCHook and a broker's ``innerClientAuthenticationCredentials`` sign as they already do.
Reads stay open to anyone; every other request, including codes not in :data:`NAMESRV_REQUESTS`, needs an
admin account's signature or a whitelisted address (``globalWhiteRemoteAddresses``, or the account's
``whiteRemoteAddress``). A refusal answers 1 (SYSTEM_ERROR) with the broker's ``AclException`` remark.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any

from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand

from .plain_access_validator import PlainAccessValidator
from .plain_permission_manager import PlainPermissionManager

if TYPE_CHECKING:
    from gateway.namesrv.config import NamesrvConfig
    from gateway.remoting.dispatch import RequestDispatcher
    from gateway.remoting.protocol import RemotingProtocol


class NamesrvAccess(Enum):
    """Who may send a request to the NameServer."""

    READ = "anyone"
    ADMIN = "an admin account or a whitelisted address"


_READ, _ADMIN = NamesrvAccess.READ, NamesrvAccess.ADMIN

# Every request code the NameServer (and a controller embedded in it) serves.
NAMESRV_REQUESTS: Mapping[int, NamesrvAccess] = {
    # Routes, cluster info, topic lists and KV values: what clients, brokers and tools read.
    RequestCode.GET_ROUTEINFO_BY_TOPIC: _READ,
    RequestCode.GET_BROKER_CLUSTER_INFO: _READ,
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: _READ,
    RequestCode.GET_TOPICS_BY_CLUSTER: _READ,
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: _READ,
    RequestCode.GET_UNIT_TOPIC_LIST: _READ,
    RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: _READ,
    RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: _READ,
    RequestCode.GET_KV_CONFIG: _READ,
    RequestCode.GET_KVLIST_BY_NAMESPACE: _READ,
    # Brokers: registering, and the data-version query that also keeps a registration alive.
    RequestCode.REGISTER_BROKER: _ADMIN,
    RequestCode.UNREGISTER_BROKER: _ADMIN,
    RequestCode.QUERY_DATA_VERSION: _ADMIN,
    # mqadmin.
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: _ADMIN,
    RequestCode.ADD_WRITE_PERM_OF_BROKER: _ADMIN,
    RequestCode.DELETE_TOPIC_IN_NAMESRV: _ADMIN,
    RequestCode.PUT_KV_CONFIG: _ADMIN,
    RequestCode.DELETE_KV_CONFIG: _ADMIN,
    RequestCode.UPDATE_NAMESRV_CONFIG: _ADMIN,
    RequestCode.GET_NAMESRV_CONFIG: _ADMIN,
    # The embedded controller: brokers' requests and mqadmin's.
    RequestCode.BROKER_HEARTBEAT: _ADMIN,
    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: _ADMIN,
    RequestCode.CONTROLLER_ELECT_MASTER: _ADMIN,
    RequestCode.CONTROLLER_REGISTER_BROKER: _ADMIN,
    RequestCode.CONTROLLER_GET_REPLICA_INFO: _ADMIN,
    RequestCode.CONTROLLER_GET_METADATA_INFO: _ADMIN,
    RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: _ADMIN,
    RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: _ADMIN,
    RequestCode.CONTROLLER_APPLY_BROKER_ID: _ADMIN,
    RequestCode.CLEAN_BROKER_DATA: _ADMIN,
    RequestCode.UPDATE_CONTROLLER_CONFIG: _ADMIN,
    RequestCode.GET_CONTROLLER_CONFIG: _ADMIN,
}

_NOTHING: Mapping[str, int] = {}


class NamesrvAcl:
    """The ACL of one NameServer; :meth:`install` puts its check in front of the dispatcher."""

    def __init__(self, manager: PlainPermissionManager) -> None:
        self.manager = manager
        self.validator = PlainAccessValidator(manager)

    @classmethod
    def for_namesrv(cls, config: NamesrvConfig, system_properties: Mapping[str, str] | None, clock: Any) -> NamesrvAcl:
        """Files under ``rocketmqHome`` (namesrv.properties), ``rocketmq.home.dir`` or ``$ROCKETMQ_HOME``.

        Raises :class:`~gateway.config.ConfigError` when they cannot be found or loaded.
        """
        return cls(PlainPermissionManager.for_server(config.rocketmqHome, system_properties, clock))

    def hook(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand | None:
        """A :class:`~gateway.remoting.dispatch.RequestDispatcher` hook: reads pass, anything else needs an admin."""
        if NAMESRV_REQUESTS.get(request.code) is _READ:
            return None
        return self.validator.refuse(channel, request, _NOTHING, needs_admin=True)

    def install(self, dispatcher: RequestDispatcher) -> None:
        dispatcher.hooks.append(self.hook)

    def start(self) -> None:
        self.manager.start()

    def stop(self) -> None:
        self.manager.stop()
