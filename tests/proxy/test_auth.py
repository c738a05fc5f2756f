"""The SDKs' signatures checked against plain_acl.yml (real files), with remoting's permissions."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest

from gateway.acl.plain_permission_manager import PlainPermissionManager
from gateway.proxy.auth import AclAuthenticator, needed_resources
from gateway.proxy.convert import ProxyError
from gateway.proxy.service import ProxyContext
from gateway.proxy.v2 import definition_pb2 as pb
from gateway.proxy.v2 import service_pb2 as spb

ACL = """\
globalWhiteRemoteAddresses: ["10.9.*.*"]
accounts:
  - accessKey: appUser01
    secretKey: appSecret01
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - Orders=PUB
      - Reports=SUB
"""
DATE = "20261128T054500Z"


@pytest.fixture
def auth(tmp_path: Path) -> AclAuthenticator:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "plain_acl.yml").write_text(ACL)
    return AclAuthenticator(PlainPermissionManager(str(tmp_path)))


def ctx(secret: str | None = "appSecret01", host: str = "127.0.0.1", key: str = "appUser01") -> ProxyContext:
    metadata = {"x-mq-date-time": DATE}
    if secret is not None:
        signature = hmac.new(secret.encode(), DATE.encode(), hashlib.sha1).hexdigest().upper()
        metadata["authorization"] = (
            f"MQv2-HMAC-SHA1 Credential={key}, SignedHeaders=x-mq-date-time, Signature={signature}"
        )
    return ProxyContext("c1", "PYTHON", "5.1.2", "", f"{host}:50000", metadata)


def send(topic: str) -> spb.SendMessageRequest:
    return spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=topic))])


def refusal(auth: AclAuthenticator, context: ProxyContext, request: object) -> str:
    with pytest.raises(ProxyError) as e:
        auth.check(context, request)
    assert e.value.code == pb.Code.UNAUTHORIZED
    return e.value.message


def test_signed_requests_within_permissions(auth: AclAuthenticator) -> None:
    auth.check(ctx(), send("Orders"))
    route = spb.QueryRouteRequest(topic=pb.Resource(name="Reports"))
    auth.check(ctx(), route)  # QueryRoute needs PUB or SUB
    assert refusal(auth, ctx(), send("Reports")) == "No default permission for topic:Reports"
    assert refusal(auth, ctx(), send("Other")) == "No default permission for topic:Other"


def test_unsigned_unknown_and_badly_signed(auth: AclAuthenticator) -> None:
    assert refusal(auth, ctx(secret=None), send("Orders")) == "No accessKey is configured"
    assert refusal(auth, ctx(key="nobody1"), send("Orders")) == "No acl config for nobody1"
    assert refusal(auth, ctx(secret="wrong-secret"), send("Orders")) == (
        "Check signature failed for accessKey=appUser01"
    )
    # A globally white-listed address needs no signature.
    auth.check(ctx(secret=None, host="10.9.1.2"), send("Other"))


def test_resources_of_requests() -> None:
    settings = pb.Settings(
        subscription=pb.Subscription(
            group=pb.Resource(name="G"), subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name="T"))]
        )
    )
    assert needed_resources(settings) == {"%RETRY%G": 8, "T": 8}
    heartbeat = spb.HeartbeatRequest(group=pb.Resource(name="G"))
    assert needed_resources(heartbeat) == {"%RETRY%G": 8}
    end = spb.EndTransactionRequest(topic=pb.Resource(name="T"))
    assert needed_resources(end) == {"T": 4}


def test_pull_and_offsets_need_subscribe_permission(auth: AclAuthenticator) -> None:
    def on(topic: str) -> pb.MessageQueue:
        return pb.MessageQueue(topic=pb.Resource(name=topic), id=0, broker=pb.Broker(name="b"))

    group = pb.Resource(name="G")
    auth.check(ctx(), spb.PullMessageRequest(group=group, message_queue=on("Reports")))
    auth.check(ctx(), spb.QueryOffsetRequest(message_queue=on("Reports")))
    assert refusal(auth, ctx(), spb.PullMessageRequest(group=group, message_queue=on("Orders"))) == (
        "No default permission for topic:Orders"
    )
    update = spb.UpdateOffsetRequest(group=group, message_queue=on("Orders"), offset=1)
    assert refusal(auth, ctx(), update) == "No default permission for topic:Orders"
