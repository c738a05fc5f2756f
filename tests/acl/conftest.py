"""A RocketMQ home with plain_acl.yml, and helpers to build signed requests."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gateway.acl.signer import SessionCredentials
from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import PullMessageRequestHeader, SendMessageRequestHeader

# Apache's distribution/conf/plain_acl.yml, with 127.0.0.1 in no whitelist, plus test accounts.
PLAIN_ACL_YML = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true

  - accessKey: loopback-user
    secretKey: loopback-secret
    whiteRemoteAddress: 127.0.0.1
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""

USER = SessionCredentials("RocketMQ", "12345678")
ADMIN = SessionCredentials("rocketmq2", "12345678")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """``$ROCKETMQ_HOME`` with conf/plain_acl.yml."""
    conf = tmp_path / "home" / "conf"
    conf.mkdir(parents=True)
    (conf / "plain_acl.yml").write_text(PLAIN_ACL_YML)
    return tmp_path / "home"


def send_request(topic: str, body: bytes = b"hello", group: str = "pg", properties: str = "") -> RemotingCommand:
    """SEND_MESSAGE_V2 as the Java client builds it (short header names)."""
    header = SendMessageRequestHeader(
        producer_group=group,
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=properties,
        reconsume_times=0,
        batch=False,
    ).encode_v2()
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body, language="JAVA")


def pull_request(topic: str, group: str) -> RemotingCommand:
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=0,
        queue_offset=0,
        max_msg_nums=32,
        sys_flag=0,
        commit_offset=0,
        suspend_timeout_millis=0,
        subscription="*",
        sub_version=0,
        expression_type="TAG",
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header.encode(), language="JAVA")


def signed(request: RemotingCommand, credentials: SessionCredentials = USER) -> RemotingCommand:
    credentials.sign(request)
    return request
