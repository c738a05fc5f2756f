"""Compiled SQL92 subscriptions of consumer groups (ConsumerFilterManager) and the pull-side message filter.

Heartbeats register each group's non-TAG subscriptions; an expression is compiled once, when it is new
or changed, and a newer ``subVersion`` with the same text only moves the version. An expression that
does not compile leaves no entry, so pulls of that subscription answer FILTER_DATA_NOT_EXIST (27) as
Apache's broker does; clients learn it earlier from CHECK_CLIENT_CONFIG when they start.
"""

from __future__ import annotations

from dataclasses import dataclass

from twisted.logger import Logger

from gateway.filter import Expression, FilterError, compile_expression, is_tag_type
from gateway.remoting.bodies import SubscriptionData
from gateway.remoting.message import decode_properties
from gateway.store.api import GetMessageResult, GetMessageStatus

log = Logger()


@dataclass(slots=True)
class ConsumerFilterData:
    topic: str
    consumer_group: str
    expression: str
    expression_type: str
    client_version: int
    compiled: Expression


class ConsumerFilterManager:
    """group → topic → the group's compiled expression for that topic."""

    def __init__(self) -> None:
        # By group first: a heartbeat touches only its own groups' entries, however many groups there are.
        self.table: dict[str, dict[str, ConsumerFilterData]] = {}

    def get(self, topic: str, group: str) -> ConsumerFilterData | None:
        return self.table.get(group, {}).get(topic)

    def register(self, group: str, subs: list[SubscriptionData]) -> None:
        """A heartbeat's subscriptions for ``group``; topics it no longer lists lose their filter."""
        listed = set()
        for sub in subs:
            listed.add(sub.topic)
            if not is_tag_type(sub.expression_type) and sub.sub_string:
                self._register(group, sub)
        filters = self.table.get(group)
        if filters is None:
            return
        for topic in [t for t in filters if t not in listed]:
            del filters[topic]
        if not filters:
            del self.table[group]

    def _register(self, group: str, sub: SubscriptionData) -> None:
        old = self.get(sub.topic, group)
        if old is not None:
            if sub.sub_version <= old.client_version:
                return
            if (old.expression, old.expression_type) == (sub.sub_string, sub.expression_type):
                old.client_version = sub.sub_version
                return
        try:
            compiled = compile_expression(sub.expression_type, sub.sub_string)
        except FilterError as e:
            log.error(
                "parse error: expr={expr}, topic={topic}, group={group}, error={error}",
                expr=sub.sub_string,
                topic=sub.topic,
                group=group,
                error=e,
            )
            # A changed expression that does not compile drops the old one: pulls then report the error.
            self.table.get(group, {}).pop(sub.topic, None)
            return
        self.table.setdefault(group, {})[sub.topic] = ConsumerFilterData(
            sub.topic, group, sub.sub_string, sub.expression_type, sub.sub_version, compiled
        )


def filter_by_properties(result: GetMessageResult, expression: Expression) -> None:
    """ExpressionMessageFilter.isMatchedByCommitLog over a store result: keep the records whose properties
    match; with none left the status becomes NO_MATCHED_MESSAGE. ``next_begin_offset`` already counts the
    skipped records, so the consumer moves past them."""
    if result.status is not GetMessageStatus.FOUND:
        return
    kept = [record for record in result.buffers if expression.matches(decode_properties(record))]
    result.buffers = kept
    result.buffer_total_size = sum(map(len, kept))
    if not kept:
        result.status = GetMessageStatus.NO_MATCHED_MESSAGE
