"""Signatures equal to the Java client's, and permission parsing as Java's Permission does it.

The golden signatures were printed by the official 4.9.8 client: a SEND_MESSAGE_V2 request
(SendMessageRequestHeaderV2 below, body "hello 世界") through
``new AclClientRPCHook(new SessionCredentials("RocketMQ", "12345678")).doBeforeRequest(...)``, and a
header-less GET_BROKER_CLUSTER_ACL_INFO with ``SessionCredentials("rocketmq2", "12345678", "tokén")``.
"""

from __future__ import annotations

import pytest

from gateway.acl.permission import (
    ANY,
    DENY,
    PUB,
    SUB,
    AclError,
    check_permission,
    check_resource_perms,
    describe,
    parse_perm,
    parse_resource_perms,
)
from gateway.acl.signer import SessionCredentials, cal_signature, java_sorted, request_content
from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand

JAVA_V2_HEADER = {
    "a": "pg\u00e9",
    "b": "TopicTest",
    "c": "TBW102",
    "d": "4",
    "e": "1",
    "f": "0",
    "g": "1700000000000",
    "h": "0",
    "i": "KEYS\u0001k1\u0002TAGS\u0001\u4e2d\u6587\u0002",
    "j": "0",
    "k": "false",
    "m": "false",
}


def test_signature_equals_the_java_clients() -> None:
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, dict(JAVA_V2_HEADER), "hello \u4e16\u754c".encode())
    SessionCredentials("RocketMQ", "12345678").sign(request)
    assert request.ext_fields is not None
    assert request.ext_fields["AccessKey"] == "RocketMQ"
    assert request.ext_fields["Signature"] == "MAo+y86el3XN4fAqL2xIPYVQbtE="


def test_security_token_is_signed_too() -> None:
    request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_ACL_INFO)
    SessionCredentials("rocketmq2", "12345678", "tok\u00e9n").sign(request)
    assert request.ext_fields == {
        "AccessKey": "rocketmq2",
        "SecurityToken": "tok\u00e9n",
        "Signature": "rWRasO4qwJzT4uyyKRxpu4HD8rg=",
    }


def test_signing_twice_gives_the_same_signature() -> None:
    """A request re-sent (another broker, a retry) is signed again over the same content."""
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, dict(JAVA_V2_HEADER), b"x")
    creds = SessionCredentials("RocketMQ", "12345678")
    creds.sign(request)
    first = dict(request.ext_fields or {})
    creds.sign(request)
    assert request.ext_fields == first


def test_content_order_is_javas() -> None:
    # UTF-16 order puts U+FF21 (fullwidth A) after a surrogate pair (U+1F600), code point order does not.
    keys = ["b", "\uff21", "\U0001f600", "a", "B"]
    assert java_sorted(keys) == ["B", "a", "b", "\U0001f600", "\uff21"]
    assert request_content({"b": "2", "a": "1", "Signature": "x"}) == b"12"
    assert cal_signature("12345678", b"") == cal_signature("12345678", request_content(None))


def test_credentials_do_not_show_the_secret() -> None:
    assert "12345678" not in repr(SessionCredentials("RocketMQ", "12345678"))


def test_perm_names() -> None:
    assert [parse_perm(p) for p in ("PUB", "SUB", " PUB|SUB ", "SUB|PUB", "DENY", "pub", None, "ANY")] == [
        PUB,
        SUB,
        PUB | SUB,
        PUB | SUB,
        DENY,
        DENY,
        DENY,
        DENY,
    ]


def test_check_permission() -> None:
    assert check_permission(PUB, PUB | SUB) and check_permission(SUB, SUB)
    assert not check_permission(PUB, SUB)
    assert not check_permission(PUB, DENY | PUB)
    assert check_permission(ANY, SUB) and not check_permission(ANY, DENY)


def test_resource_perms() -> None:
    assert parse_resource_perms(["topicA=PUB", " topicB = SUB|PUB "], is_topic=True) == {
        "topicA": PUB,
        "topicB": PUB | SUB,
    }
    assert parse_resource_perms(["g1=SUB"], is_topic=False) == {"%RETRY%g1": SUB}
    with pytest.raises(AclError, match="Parse resource permission failed for topic:x"):
        parse_resource_perms(["x"], is_topic=True)
    check_resource_perms(["a=DENY", "b=PUB|SUB"])
    with pytest.raises(AclError, match="expected permissions"):
        check_resource_perms(["a=XYZ"])
    assert (describe("%RETRY%g"), describe("t")) == ("group:g", "topic:t")
