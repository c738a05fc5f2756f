"""BrokerController.initialAcl: the broker's ACL when ``aclEnable=true`` — files, pre-request hook, admin requests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .admin import AclAdminProcessor
from .plain_access_validator import PlainAccessValidator
from .plain_permission_manager import PlainPermissionManager

if TYPE_CHECKING:
    from gateway.broker.config import BrokerConfig
    from gateway.remoting.dispatch import RequestDispatcher


class BrokerAcl:
    """The ACL of one broker; :meth:`install` puts it in front of the broker's dispatcher."""

    def __init__(self, manager: PlainPermissionManager, config: BrokerConfig) -> None:
        self.manager = manager
        self.validator = PlainAccessValidator(manager)
        self.admin = AclAdminProcessor(manager, config)

    @classmethod
    def for_broker(cls, config: BrokerConfig, system_properties: Mapping[str, str] | None, clock: Any) -> BrokerAcl:
        """Files under ``rocketmqHome`` (broker.conf), ``rocketmq.home.dir`` or ``$ROCKETMQ_HOME``.

        Raises :class:`~gateway.config.ConfigError` when they cannot be found or loaded.
        """
        return cls(PlainPermissionManager.for_server(config.rocketmqHome, system_properties, clock), config)

    def install(self, dispatcher: RequestDispatcher) -> None:
        """Check every request first; serve the ACL admin codes."""
        dispatcher.hooks.append(self.validator.hook)
        dispatcher.register_all(self.admin.handlers())

    def start(self) -> None:
        self.manager.start()

    def stop(self) -> None:
        self.manager.stop()
