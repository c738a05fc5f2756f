"""A broker in DLedger mode: its commitlog is a DLedger ledger and its role follows the leadership
(Apache 4.9.8's DLedgerRoleChangeHandler and BrokerController.changeToMaster / changeToSlave).

The leader becomes the master (brokerId 0, SYNC_MASTER) once everything it holds is committed and dispatched;
a follower or candidate becomes a slave whose brokerId is its self id's number + 1. Either change stops or
starts the master's services (delayed and timer delivery, transaction check-back, pop revive) and registers
with the NameServers at once, so clients follow the route. DLedger replicates the commitlog: the 4.x HA
service is not started, and a slave only copies its master's metadata (topics, offsets, groups).
"""

from __future__ import annotations

import functools
import math
import time
from typing import TYPE_CHECKING, Any

from twisted.internet import defer, task
from twisted.logger import Logger

from gateway.dledger.commitlog import DLedgerCommitLog
from gateway.dledger.config import DLedgerConfigError
from gateway.dledger.member_state import MemberRole
from gateway.dledger.server import DLedgerServer
from gateway.dledger.store import DLedgerFileStore

from .config import dledger_config, dledger_config_error

if TYPE_CHECKING:
    from .controller import BrokerController

log = Logger()

# DLedgerRoleChangeHandler: a new leader looks again this often whether all it holds is committed and dispatched.
LEADER_CATCH_UP_INTERVAL = 0.1


class DLedgerRoles:
    """The broker's DLedger member and the role changes it drives."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        config = dledger_config(broker.config, broker.store_config)
        self.ledger = DLedgerFileStore(config.store)
        self.server = DLedgerServer(config, broker.reactor, self.ledger)
        self._catch_up: task.LoopingCall | None = None
        self._first_role: defer.Deferred[Any] = defer.Deferred()
        self._applied = False  # a role change was handled
        self._lease_lapsed = False  # logged once per lapse

    @property
    def data_path(self) -> str:
        """Where the ledger's data files are (``DLedgerConfig.getDataStorePath``)."""
        return self.ledger.data.store_path

    def commit_log(self) -> Any:
        """The store's commitlog factory: the records in the ledger, appended through the member."""
        return functools.partial(DLedgerCommitLog, ledger=self.ledger, appender=self.server.append)

    def start(self) -> None:
        """Start the member (the store has opened the ledger): listen for its peers and elect. A peer address
        it cannot listen on is a ConfigError naming dLegerPeers and the file."""
        self.server.add_role_listener(self.role_changed)
        self.server.add_commit_listener(self._committed)
        try:
            self.server.startService()
        except DLedgerConfigError as e:
            path = self.broker.config.brokerConfigPath
            raise dledger_config_error(e, lambda _key: path or "command line") from None

    def first_role(self) -> defer.Deferred[Any]:
        """Take the member's role now unless an election already gave one; fires once the first role is
        registered. A member starts as a candidate: as Apache's handler does on CANDIDATE, a broker that is not a
        slave becomes one, so it is in the route (as a slave) before any election."""
        if not self._applied:
            ms = self.server.member_state
            self.role_changed(ms.role, ms.term, ms.leader_id)
        return self._first_role

    def stop(self) -> defer.Deferred[Any]:
        self._stop_catch_up()
        return defer.maybeDeferred(self.server.stopService)

    # -- events

    def _committed(self, committed_index: int) -> None:
        # The reput dispatches what the ledger committed (the commitlog's max offset is the committed position).
        self.broker.store.dispatch_appended()

    def role_changed(self, role: MemberRole, term: int, leader_id: str | None) -> None:
        """DLedgerRoleChangeHandler.handle, run in order on the reactor."""
        broker = self.broker
        log.info(
            "Begin handling broker role change term={term} role={role} currStoreRole={store_role}",
            term=term,
            role=role.name,
            store_role=broker.store_config.brokerRole,
        )
        self._applied = True
        self._stop_catch_up()
        start = time.monotonic()
        if role is MemberRole.LEADER:
            self._catch_up = task.LoopingCall(self._leader_caught_up, term, start)
            self._catch_up.clock = broker.reactor
            self._catch_up.start(LEADER_CATCH_UP_INTERVAL, now=True).addErrback(
                lambda f: log.failure("[MONITOR]Failed handling broker role change term={term}", f, term=term)
            )
            return
        if role is MemberRole.FOLLOWER or broker.config.brokerRole != "SLAVE" or broker.config.brokerId < 0:
            self._registered(broker.change_role("SLAVE", broker.config.dledger_broker_id))
        self._finished(True, term, role, start)

    def _leader_caught_up(self, term: int, start: float) -> None:
        """Become the master once the ledger's end is committed and dispatched (or it is empty); give up if
        leadership was lost meanwhile."""
        ms, store = self.server.member_state, self.broker.store
        if ms.role is not MemberRole.LEADER or ms.term != term:
            self._stop_catch_up()
            self._finished(False, term, MemberRole.LEADER, start)
            return
        ledger = self.ledger
        if ledger.ledger_end_index != -1 and (
            ledger.ledger_end_index != ledger.committed_index or self.broker.dispatch_behind() > 0
        ):
            return
        self._stop_catch_up()
        store.recover_topic_queue_table()
        self._registered(self.broker.change_role("SYNC_MASTER", 0))
        self._finished(True, term, MemberRole.LEADER, start)

    def holds_lease(self) -> bool:
        """Whether this master may register as brokerId 0: its member leads and heard from a majority within
        DLedger's heartbeat timeout (:meth:`DLedgerServer.heard_from_majority`). A leader frozen (SIGSTOP) or cut
        off past it registers nothing as master: thawed, its due registrations would put its address back under
        brokerId 0 just before it learns of the new term and registers as a slave, which drops that id, the new
        master's too, from the route until the new master registers again."""
        server = self.server
        held = server.heard_from_majority()
        if not held and not self._lease_lapsed:
            silence = server.majority_silence_ms()
            log.warn(
                "not registering as master: {why} (DLedger group {group}, term {term})",
                why=f"no majority heard from for {int(silence)} ms" if silence != math.inf else "not the leader",
                group=server.config.group,
                term=server.member_state.term,
            )
        self._lease_lapsed = not held
        return held

    def _stop_catch_up(self) -> None:
        if self._catch_up is not None and self._catch_up.running:
            self._catch_up.stop()
        self._catch_up = None

    def _registered(self, d: defer.Deferred[Any]) -> None:
        if not self._first_role.called:
            d.chainDeferred(self._first_role)

    def _finished(self, succeeded: bool, term: int, role: MemberRole, start: float) -> None:
        log.info(
            "Finish handling broker role change succ={succ} term={term} role={role} currStoreRole={store_role} "
            "cost={cost}",
            succ=str(succeeded).lower(),
            term=term,
            role=role.name,
            store_role=self.broker.store_config.brokerRole,
            cost=int((time.monotonic() - start) * 1000),
        )

    # -- what operators see

    def runtime_info(self) -> dict[str, str]:
        """This member's DLedger state for GET_BROKER_RUNTIME_INFO (Apache reports none: these names are ours)."""
        ms = self.server.member_state
        return {
            "dLedgerGroup": ms.group,
            "dLedgerSelfId": ms.self_id,
            "dLedgerRole": ms.role.name,
            "dLedgerTerm": str(ms.term),
            "dLedgerLeaderId": ms.leader_id or "",
            "dLedgerLedgerEndIndex": str(ms.ledger_end_index),
            "dLedgerCommittedIndex": str(ms.committed_index),
        }
