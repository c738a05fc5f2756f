"""A slave copies its master's metadata every 10 s (Apache's SlaveSynchronize.syncAll).

The master is the ``masterAddr`` of the last REGISTER_BROKER reply, as in Apache 4.9.8. One pass sends
GET_ALL_TOPIC_CONFIG to the master's VIP port (listenPort-2), then GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET,
GET_ALL_SUBSCRIPTIONGROUP_CONFIG and (as 5.x) GET_ALL_MESSAGE_REQUEST_MODE and GET_TIMER_CHECK_POINT to its main
port, each with no ext fields and no body, and applies them as Java does: topics and groups replaced (deletions
included) when the master's dataVersion differs, consumer offsets merged over the slave's (putAll), delay offsets
and request modes replaced, the timer units the master delivered marked delivered; each table then reaches its
file (topics and groups through their coalesced write). A step that fails is logged and the next one still runs.
When the VIP port does not answer (our master could not bind it, e.g. with ephemeral ports) the topic request
goes to the main port, which serves every request.

An Apache 4.9.8 master may hold entries under names this broker refuses (a group named "", dotted or long
names): they are left out of the slave's tables and set aside, as its own state files' are
(:class:`gateway.persist.SetAside`), so its files still hold what the master's do. One warning names them,
again only when they change, not every 10 s.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from twisted.internet import defer, task
from twisted.logger import Logger

from gateway.persist import SetAside, SetAsideMemo
from gateway.remoting.client import split_addr
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

from .managers import read_offsets

if TYPE_CHECKING:
    from .controller import BrokerController

log = Logger()

# Java's BrokerController schedules syncAll at a fixed rate of 10 s; Apache 4.9.8 sends the first ~3-4 s after
# start. Tests shorten them by patching these before the broker is built.
SYNC_FIRST_DELAY = 3.0
SYNC_INTERVAL = 10.0
# BrokerOuterAPI's getAll* calls wait 3 s.
SYNC_TIMEOUT = 3.0


class MasterRefused(Exception):
    """The master answered a sync request with an error code (``code``; None: not asked)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def vip_addr(addr: str) -> str:
    """The VIP channel of a broker address: its port minus 2 (MixAll.brokerVIPChannel)."""
    host, port = split_addr(addr)
    return f"{host}:{port - 2}"


class SlaveSynchronize:
    """The periodic copy of a master's topics, consumer offsets, delay offsets and subscription groups."""

    def __init__(self, broker: BrokerController, interval: float | None = None, first_delay: float | None = None):
        """``interval`` and ``first_delay`` in seconds default to :data:`SYNC_INTERVAL` and
        :data:`SYNC_FIRST_DELAY`."""
        self.broker = broker
        self.interval = SYNC_INTERVAL if interval is None else interval
        self.first_delay = SYNC_FIRST_DELAY if first_delay is None else first_delay
        self.client = broker.outer_client()
        self._loop = task.LoopingCall(self.sync_all)
        self._loop.clock = broker.reactor
        self._first: Any = None
        # Per state file, the names of the master's entries last warned of as left out.
        self._left_out = SetAsideMemo()

    @property
    def master_addr(self) -> str | None:
        """The master's address as the NameServer last told it, or None before the first registration reply."""
        return self.broker.registration.master_addr

    def start(self) -> None:
        """Start syncing (again) in ``first_delay`` seconds; nothing if already started."""
        if self._first is not None or self._loop.running:
            return
        self._first = self.broker.reactor.callLater(self.first_delay, self._start_loop)

    def _start_loop(self) -> None:
        self._first = None
        self._loop.start(self.interval).addErrback(lambda f: log.failure("slave synchronize stopped", f))

    def stop(self) -> defer.Deferred[Any]:
        """Stop the loop and close the connections to the master."""
        if self._first is not None and self._first.active():
            self._first.cancel()
        self._first = None
        if self._loop.running:
            self._loop.stop()
        return self.client.close()

    @defer.inlineCallbacks
    def sync_all(self) -> Any:
        """One pass over the four tables; fires when it is done (failures are logged, never raised)."""
        master = self.master_addr
        if not master or master == self.broker.config.broker_addr:
            return
        for step in (
            self._sync_topic_config,
            self._sync_consumer_offset,
            self._sync_delay_offset,
            self._sync_groups,
            self._sync_message_request_mode,
            self._sync_timer_check_point,
        ):
            try:
                yield step(master)
            except Exception as e:  # one table failing must not keep the others stale
                log.error("{step} from master {master} failed: {error!r}", step=step.__name__, master=master, error=e)

    @defer.inlineCallbacks
    def _fetch(self, addr: str, code: int) -> Any:
        response = yield self.client.invoke(addr, RemotingCommand.request(code, language="JAVA"), SYNC_TIMEOUT)
        if response.code != ResponseCode.SUCCESS:
            raise MasterRefused(f"code {code}: {response.code} {response.remark}", response.code)
        return response.body

    def _warn_left_out(self, path: Path, set_aside: SetAside, master: str) -> None:
        """Warn of the master's entries set aside from ``path``'s table when their names change."""
        if self._left_out.changed(path, set_aside):
            set_aside.warn(f"{path} from master {master}")

    @defer.inlineCallbacks
    def _sync_topic_config(self, master: str) -> Any:
        vip = vip_addr(master)
        try:
            if vip == self.broker.config.broker_addr:  # ephemeral ports: listenPort-2 may be this very broker
                raise MasterRefused(f"{vip} is this broker")
            body = yield self._fetch(vip, RequestCode.GET_ALL_TOPIC_CONFIG)
        except Exception as e:
            log.debug("VIP channel of {master} unusable ({error!r}), using its main port", master=master, error=e)
            body = yield self._fetch(master, RequestCode.GET_ALL_TOPIC_CONFIG)
        topics = self.broker.topics
        wrapper, aside = topics.read(body)
        self._warn_left_out(topics.path, aside, master)
        if (yield topics.replace_all(wrapper.topic_config_table, wrapper.data_version, aside)):
            log.info("Update slave topic config from master, {master}", master=master)

    @defer.inlineCallbacks
    def _sync_consumer_offset(self, master: str) -> Any:
        body = yield self._fetch(master, RequestCode.GET_ALL_CONSUMER_OFFSET)
        table, aside = read_offsets(body)
        self._warn_left_out(self.broker.offsets.path, aside, master)
        self.broker.offsets.merge(table, aside)
        log.info("Update slave consumer offset from master, {master}", master=master)

    @defer.inlineCallbacks
    def _sync_delay_offset(self, master: str) -> Any:
        body = yield self._fetch(master, RequestCode.GET_ALL_DELAY_OFFSET)
        schedule = self.broker.schedule
        table, aside = schedule.read(body)
        self._warn_left_out(schedule.path, aside, master)
        schedule.replace_offsets(table, aside)
        log.info("Update slave delay offset from master, {master}", master=master)

    @defer.inlineCallbacks
    def _sync_groups(self, master: str) -> Any:
        body = yield self._fetch(master, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        groups = self.broker.groups
        wrapper, aside = groups.read(body)
        self._warn_left_out(groups.path, aside, master)
        if (yield groups.replace_all(wrapper.subscription_group_table, wrapper.data_version, aside)):
            log.info("Update slave Subscription Group from master, {master}", master=master)

    @defer.inlineCallbacks
    def _sync_message_request_mode(self, master: str) -> Any:
        try:
            body = yield self._fetch(master, RequestCode.GET_ALL_MESSAGE_REQUEST_MODE)
        except MasterRefused as e:
            if e.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                return  # a 4.x master: it has no request modes, and no error every 10 s
            raise
        modes = self.broker.request_modes
        modes.replace_all(modes.read(body))

    @defer.inlineCallbacks
    def _sync_timer_check_point(self, master: str) -> Any:
        try:
            body = yield self._fetch(master, RequestCode.GET_TIMER_CHECK_POINT)
        except MasterRefused as e:
            if e.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                return  # a 4.x master: no timer messages
            raise
        if self.broker.config.is_slave:  # promoted meanwhile: the timer is ours to run now
            self.broker.timer.follow_master(body)
