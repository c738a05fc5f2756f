"""What the proxy reads of the cluster besides messages (Apache's ClusterMetadataService): topic routes and the
subscription groups' configs, read from the brokers and kept a while."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.logger import Logger

from gateway.remoting.bodies import SubscriptionGroupConfig

from .convert import ProxyError
from .v2 import definition_pb2 as pb

if TYPE_CHECKING:
    from .service import MessagingService

log = Logger()

# How long a group's config is used before it is read again, and how many groups are kept.
GROUP_CONFIG_TTL_MS = 20_000
MAX_CACHED_GROUP_CONFIGS = 10_000


class MetadataService:
    """Topic routes from the name servers; group configs from the brokers (GET_SUBSCRIPTIONGROUP_CONFIG)."""

    def __init__(self, service: MessagingService) -> None:
        self.service = service
        # group -> (when read, its config from a broker or None: no such group, or a 4.x broker)
        self.group_configs: dict[str, tuple[int, SubscriptionGroupConfig | None]] = {}

    async def route(self, topic: str) -> Any:
        """The topic's route; TOPIC_NOT_FOUND when no name server knows it."""
        instance = self.service.instance
        route = instance.topic_routes.get(topic)
        if route is None and await instance.update_topic_route_from_namesrv(topic):
            route = instance.topic_routes.get(topic)
        if route is None:
            raise ProxyError(pb.Code.TOPIC_NOT_FOUND, f"No topic route info in name server for the topic: {topic}")
        return route

    async def group_config(self, group: str, addr: str) -> SubscriptionGroupConfig | None:
        """The group's config as the broker at ``addr`` has it; None when it has none or cannot say (then the
        defaults apply, and the broker is asked again on the next call)."""
        now = self.service.now_ms()
        cached = self.group_configs.get(group)
        if cached is not None and now - cached[0] <= GROUP_CONFIG_TTL_MS:
            return cached[1]
        try:
            body = await self.service.instance.api.get_subscription_group_config(addr, group)
            config = None if body is None else SubscriptionGroupConfig.from_json(body)
        except Exception as e:
            log.warn("cannot read the config of group {group} from {addr}: {e}", group=group, addr=addr, e=e)
            return None
        if cached is None and len(self.group_configs) >= MAX_CACHED_GROUP_CONFIGS:
            del self.group_configs[next(iter(self.group_configs))]
        self.group_configs[group] = (now, config)
        return config

    async def group_config_of_topic(self, group: str, topic: str) -> SubscriptionGroupConfig | None:
        """The group's config from a master serving ``topic`` (the brokers the group consumes from)."""
        try:
            route = await self.route(topic)
        except ProxyError:
            return None
        addrs = [bd.master_addr() for bd in route.broker_datas if bd.master_addr()]
        return await self.group_config(group, addrs[0]) if addrs else None
