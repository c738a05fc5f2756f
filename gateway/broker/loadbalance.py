"""Load balancing done by the broker for 5.x lite pull and POP consumers (Apache's broker.loadbalance and
TopicRouteInfoManager): each group's request mode per topic, kept in config/messageRequestMode.json, and the
readable queues of topics as the NameServers route them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.logger import Logger

from gateway.client.api import MQClientAPI
from gateway.client.route import subscribe_queues
from gateway.persist import load_with_backup, write_atomically
from gateway.remoting import fastjson
from gateway.remoting.bodies import MessageQueue, MessageRequestModeSerializeWrapper, SetMessageRequestModeRequestBody

if TYPE_CHECKING:
    from .controller import BrokerController

log = Logger()

# BrokerOuterAPI's getTopicRouteInfoFromNameServer waits 3 s.
GET_TOPIC_ROUTE_TIMEOUT = 3.0


class MessageRequestModeManager:
    """messageRequestMode.json: topic → group → the mode SET_MESSAGE_REQUEST_MODE set (Apache's file and JSON)."""

    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / "messageRequestMode.json"
        self.table: dict[str, dict[str, SetMessageRequestModeRequestBody]] = {}

    @staticmethod
    def read(data: bytes) -> dict[str, dict[str, SetMessageRequestModeRequestBody]]:
        """The table of a messageRequestMode.json or of a GET_ALL_MESSAGE_REQUEST_MODE body."""
        return MessageRequestModeSerializeWrapper.from_json(fastjson.loads(data)).message_request_mode_map

    def load(self) -> None:
        loaded = load_with_backup(self.path, self.read)
        if loaded is not None:
            self.table = loaded

    def encode(self) -> bytes:
        return fastjson.dumps(MessageRequestModeSerializeWrapper(self.table))

    def persist(self) -> None:
        write_atomically(self.path, self.encode())

    def get(self, topic: str, group: str) -> SetMessageRequestModeRequestBody | None:
        return self.table.get(topic, {}).get(group)

    def set(self, body: SetMessageRequestModeRequestBody) -> None:
        """Record ``body`` for its topic and group, and persist."""
        self.table.setdefault(body.topic, {})[body.consumer_group] = body
        self.persist()

    def replace_all(self, table: dict[str, dict[str, SetMessageRequestModeRequestBody]]) -> None:
        """A slave takes its master's table (SlaveSynchronize.syncMessageRequestMode), and persists it."""
        self.table = table
        self.persist()


class TopicRouteInfoManager:
    """The readable queues of each topic a QUERY_ASSIGNMENT asked about, from the NameServers: fetched on first
    use, refreshed every ``loadBalancePollNameServerInterval`` (refresh), dropped when a NameServer says the
    topic does not exist."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.subscribe_info: dict[str, set[MessageQueue]] = {}
        self._api: MQClientAPI | None = None

    def _client_api(self) -> MQClientAPI | None:
        addrs = self.broker.config.namesrv_addrs
        if not addrs:
            return None
        if self._api is None or self._api.namesrv_addrs != addrs:
            self._api = MQClientAPI(self.broker.namesrv_client, addrs, GET_TOPIC_ROUTE_TIMEOUT)
        return self._api

    async def _update(self, topic: str) -> None:
        api = self._client_api()
        if api is None:
            return
        try:
            route = await api.get_topic_route(topic)
        except Exception as e:
            log.error("updateTopicRouteInfoFromNameServer {topic} failed: {error}", topic=topic, error=e)
            return
        if route is None:
            self.subscribe_info.pop(topic, None)
            return
        queues = subscribe_queues(topic, route)
        old = self.subscribe_info.get(topic)
        if queues != old:
            log.info(
                "the topic[{topic}] subscribe message queue changed, old[{old}] ,new[{new}]",
                topic=topic,
                old=sorted(old or ()),
                new=sorted(queues),
            )
            self.subscribe_info[topic] = queues

    @defer.inlineCallbacks
    def topic_subscribe_info(self, topic: str) -> Any:
        """Fires with the topic's readable queues (asking the NameServers when none are known), or None."""
        if not self.subscribe_info.get(topic):
            yield defer.ensureDeferred(self._update(topic))
        return self.subscribe_info.get(topic)

    @defer.inlineCallbacks
    def refresh(self) -> Any:
        """Fetch every known topic's route again (the periodic task)."""
        for topic in list(self.subscribe_info):
            yield defer.ensureDeferred(self._update(topic))
