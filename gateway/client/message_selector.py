"""MessageSelector: what a consumer subscribes to, by tag (``TagA || TagB``, ``*``) or by SQL92 over message
properties (``MessageSelector.by_sql("region = 'eu' AND amount > 100")``), which brokers evaluate only with
``enablePropertyFilter=true``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gateway.remoting.bodies import SubscriptionData


@dataclass(frozen=True, slots=True)
class MessageSelector:
    expression_type: str
    expression: str

    TAG: ClassVar[str] = "TAG"
    SQL92: ClassVar[str] = "SQL92"

    @classmethod
    def by_tag(cls, tags: str = SubscriptionData.SUB_ALL) -> MessageSelector:
        return cls(cls.TAG, tags)

    @classmethod
    def by_sql(cls, sql: str) -> MessageSelector:
        return cls(cls.SQL92, sql)

    def subscription_data(self, topic: str) -> SubscriptionData:
        """FilterAPI.build: tags are split and hashed; other expressions travel as they are."""
        return SubscriptionData.build(topic, self.expression, self.expression_type)
