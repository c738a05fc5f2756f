"""Where Apache 4.9.8's ACL leaks, ours refuses: an account denied a topic cannot read its messages by
offset (VIEW_MESSAGE_BY_ID), copy them into its own retry topic (CONSUMER_SEND_MSG_BACK), nor send into
another group's retry topic by naming a group it may use. A real broker with aclEnable=true on 127.0.0.1."""

from __future__ import annotations

import pytest_twisted

from gateway.acl.signer import SessionCredentials
from gateway.broker.controller import BrokerController
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import ConsumerSendMsgBackRequestHeader, ViewMessageRequestHeader
from gateway.remoting.message import MessageConst, decode_offset_message_id, decode_record, properties_to_string

from .conftest import ADMIN, USER, send_request, signed
from .test_broker_acl import assert_denied, broker, client  # noqa: F401

# USER (RocketMQ): topicA=DENY, topicB=PUB|SUB, topicC=SUB; groupA=DENY, groupB=PUB|SUB, groupC=SUB.


async def stored_offset(broker: BrokerController, client: RemotingClient, request: RemotingCommand) -> int:  # noqa: F811
    """Send ``request`` signed by the admin; the commitlog offset of the stored message."""
    response = await client.invoke(broker.config.broker_addr, signed(request, ADMIN))
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert response.ext_fields is not None
    return decode_offset_message_id(response.ext_fields["msgId"])[1]


def retried_from(topic: str) -> str:
    """The properties of a message that came back to a retry topic from ``topic``."""
    return properties_to_string({MessageConst.RETRY_TOPIC: topic})


def view(offset: int, credentials: SessionCredentials = USER) -> RemotingCommand:
    header = ViewMessageRequestHeader(offset).encode()
    return signed(RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, header), credentials)


def send_back(offset: int, group: str) -> RemotingCommand:
    header = ConsumerSendMsgBackRequestHeader(offset=offset, group=group, delay_level=-1, origin_topic="topicB")
    return signed(RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.encode(), language="JAVA"))


@pytest_twisted.ensureDeferred
async def test_view_message_by_id_needs_sub_on_the_stored_topic(
    broker: BrokerController,  # noqa: F811
    client: RemotingClient,  # noqa: F811
) -> None:
    addr = broker.config.broker_addr
    secret = await stored_offset(broker, client, send_request("topicA", b"secret"))
    readable = await stored_offset(broker, client, send_request("topicB", b"public"))
    retried = await stored_offset(
        broker, client, send_request("%RETRY%groupC", b"retried", properties=retried_from("topicA"))
    )

    assert_denied(await client.invoke(addr, view(secret)), "No default permission for topic:topicA")
    # A retried message is readable only by who may read the topic it first went to.
    assert_denied(await client.invoke(addr, view(retried)), "No default permission for topic:topicA")
    response = await client.invoke(addr, view(readable))
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert decode_record(response.body).body == b"public"
    # The admin still reads everything.
    assert (await client.invoke(addr, view(secret, ADMIN))).code == ResponseCode.SUCCESS


@pytest_twisted.ensureDeferred
async def test_send_back_needs_sub_on_the_message_topic_and_creates_nothing_when_refused(
    broker: BrokerController,  # noqa: F811
    client: RemotingClient,  # noqa: F811
) -> None:
    addr = broker.config.broker_addr
    secret = await stored_offset(broker, client, send_request("topicA", b"secret"))
    retried = await stored_offset(
        broker, client, send_request("%RETRY%groupC", b"retried", properties=retried_from("topicA"))
    )
    before = broker.put_total

    assert_denied(await client.invoke(addr, send_back(secret, "groupB")), "No default permission for topic:topicA")
    assert_denied(await client.invoke(addr, send_back(retried, "groupC")), "No default permission for topic:topicA")
    assert broker.put_total == before
    assert "%DLQ%groupB" not in broker.topics.table and "%DLQ%groupC" not in broker.topics.table

    # A message of a readable topic goes back (delay level -1: straight to the group's dead-letter queue).
    readable = await stored_offset(broker, client, send_request("topicB", b"public"))
    response = await client.invoke(addr, send_back(readable, "groupB"))
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert "%DLQ%groupB" in broker.topics.table


@pytest_twisted.ensureDeferred
async def test_a_retry_topic_send_needs_sub_on_that_topics_group_not_the_named_one(
    broker: BrokerController,  # noqa: F811
    client: RemotingClient,  # noqa: F811
) -> None:
    addr = broker.config.broker_addr
    before = broker.put_total
    # groupA is denied to USER: naming groupB (allowed) in the header does not open groupA's retry topic.
    smuggled = signed(send_request("%RETRY%groupA", b"forged", group="groupB"))
    assert_denied(await client.invoke(addr, smuggled), "No default permission for group:groupA")
    assert broker.put_total == before
    # Its own group's retry topic, whatever producer group the client names (Java's inner producer).
    own = await client.invoke(addr, signed(send_request("%RETRY%groupB", b"again", group="CLIENT_INNER_PRODUCER")))
    assert own.code == ResponseCode.SUCCESS, own.remark
