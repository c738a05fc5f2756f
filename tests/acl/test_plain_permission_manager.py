"""plain_acl.yml loaded, checked in RocketMQ's order with Apache's messages, updated, reloaded."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from twisted.internet.task import Clock
from twisted.logger import capturedLogs

from gateway.acl.permission import PUB, SUB, AclError
from gateway.acl.plain_access_validator import PlainAccessValidator
from gateway.acl.plain_permission_manager import (
    AccessDenied,
    PlainAccessConfig,
    PlainPermissionManager,
    java_split,
)
from gateway.acl.signer import SessionCredentials
from gateway.config import ConfigError
from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand

from .conftest import ADMIN, pull_request, send_request, signed

LOOPBACK = "127.0.0.1"


def check(manager: PlainPermissionManager, request: RemotingCommand, addr: str = LOOPBACK) -> None:
    resources = PlainAccessValidator.needed_resources(request)
    manager.validate(addr, request.code, request.ext_fields, request.body, resources)


def denial(manager: PlainPermissionManager, request: RemotingCommand, addr: str = LOOPBACK) -> str:
    with pytest.raises(AccessDenied) as caught:
        check(manager, request, addr)
    return caught.value.remark


def test_loads_the_home_files(home: Path) -> None:
    acl_dir = home / "conf" / "acl"
    acl_dir.mkdir()
    (acl_dir / "team.yml").write_text(
        "globalWhiteRemoteAddresses: ['172.16.*.*']\n"
        "accounts:\n- {accessKey: team-user, secretKey: team-secret, defaultTopicPerm: PUB}\n"
        "- {accessKey: RocketMQ, secretKey: overridden, admin: true}\n"
    )
    (acl_dir / "tools.yml").write_text("accessKey: rocketmq2\nsecretKey: '12345678'\n")
    manager = PlainPermissionManager(str(home))
    snapshot = manager.snapshot
    assert snapshot.files == (str(acl_dir / "team.yml"), str(home / "conf" / "plain_acl.yml"))
    # An access key defined twice keeps its first definition (conf/acl comes first).
    assert snapshot.accounts["RocketMQ"].secret_key == "overridden"
    assert snapshot.account_files["loopback-user"] == str(home / "conf" / "plain_acl.yml")
    # YAML numbers are read as Java reads them, as strings.
    assert snapshot.accounts["rocketmq2"].secret_key == "12345678"
    assert snapshot.globally_white("172.16.5.5") and snapshot.globally_white("10.10.103.7")
    assert not snapshot.globally_white(LOOPBACK)


def test_where_the_files_are(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="ROCKETMQ_HOME"):
        PlainPermissionManager(None)
    # rocketmq.acl.plain.file is relative to the home, or absolute; a missing default file is created empty.
    manager = PlainPermissionManager(str(tmp_path), "conf/other.yml")
    assert manager.default_acl_file == str(tmp_path / "conf" / "other.yml")
    assert (tmp_path / "conf" / "other.yml").exists()
    absolute = PlainPermissionManager(None, str(tmp_path / "abs.yml"))
    assert absolute.snapshot.files == (str(tmp_path / "abs.yml"),)


def test_broken_file_at_start_is_a_config_error(home: Path) -> None:
    (home / "conf" / "plain_acl.yml").write_text("accounts:\n- accessKey: short\n  secretKey: x\n")
    with pytest.raises(ConfigError, match="cannot be null and length should longer than 6"):
        PlainPermissionManager(str(home))


def test_checks_in_rocketmqs_order(home: Path) -> None:
    manager = PlainPermissionManager(str(home))
    frame = "org.apache.rocketmq.acl.plain.PlainPermissionManager"
    # 1. Global whitelist: no key needed at all.
    check(manager, send_request("topicA"), "10.10.103.9")
    # 2. The access key.
    assert denial(manager, send_request("topicB")) == (
        f"org.apache.rocketmq.acl.common.AclException: No accessKey is configured, "
        f"{frame}.validate(PlainPermissionManager.java:664)"
    )
    unknown = signed(send_request("topicB"), SessionCredentials("nobody-here", "12345678"))
    assert "No acl config for nobody-here, " in denial(manager, unknown)
    # 3. The account's whitelist: no signature needed.
    check(manager, _with(send_request("t"), AccessKey="loopback-user", Signature="not checked"))
    # 4. The signature.
    wrong = signed(send_request("topicB"), SessionCredentials("RocketMQ", "wrong-secret"))
    assert denial(manager, wrong).endswith(
        f"Check signature failed for accessKey=RocketMQ, {frame}.validate(PlainPermissionManager.java:684)"
    )
    # 5. Permissions: explicit, then default; groups through their retry topic.
    check(manager, signed(send_request("topicB")))
    assert "No default permission for topic:topicA, " in denial(manager, signed(send_request("topicA")))
    assert "No default permission for topic:topicZ, " in denial(manager, signed(send_request("topicZ")))
    assert "checkPerm(PlainPermissionManager.java:611)" in denial(manager, signed(send_request("topicA")))
    assert "checkPerm(PlainPermissionManager.java:606)" in denial(manager, signed(send_request("topicZ")))
    check(manager, signed(pull_request("topicC", "groupC")))
    assert "No default permission for group:groupA" in denial(manager, signed(pull_request("topicC", "groupA")))
    # Message traces may always be written.
    check(manager, signed(send_request("RMQ_SYS_TRACE_TOPIC")))


def _with(request: RemotingCommand, **ext: str) -> RemotingCommand:
    request.ext_fields = {**(request.ext_fields or {}), **ext}
    return request


def test_admin_codes(home: Path) -> None:
    manager = PlainPermissionManager(str(home))
    create = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "x"})
    assert denial(manager, signed(create)).startswith(
        "org.apache.rocketmq.acl.common.AclException: Need admin permission for request code=17, "
        "but accessKey=RocketMQ is not, "
    )
    for code in (RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG):
        assert "Need admin permission" in denial(manager, signed(RemotingCommand.request(code, {})))
    # An admin without resource permissions may do everything.
    check(manager, signed(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "x"}), ADMIN))
    check(manager, signed(send_request("topicA"), ADMIN))


def test_resources_of_each_request() -> None:
    needs = PlainAccessValidator.needed_resources
    assert needs(send_request("T")) == {"T": PUB}
    retry = send_request("%RETRY%cg", group="cg")
    assert needs(retry) == {"%RETRY%cg": SUB}
    assert needs(pull_request("T", "cg")) == {"T": SUB, "%RETRY%cg": SUB}
    offsets = RemotingCommand.request(
        RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "cg", "topic": "T", "queueId": "0", "commitOffset": "1"}
    )
    assert needs(offsets) == {"%RETRY%cg": SUB, "T": SUB}
    recall = RemotingCommand.request(RequestCode.RECALL_MESSAGE, {"topic": "T", "recallHandle": "h"})
    assert needs(recall) == {"T": PUB}
    heartbeat = RemotingCommand.request(
        RequestCode.HEART_BEAT,
        {},
        b'{"clientID":"c","consumerDataSet":[{"groupName":"cg","subscriptionDataSet":[{"topic":"T1"},'
        b'{"topic":"T2"}]}],"producerDataSet":[{"groupName":"pg"}]}',
    )
    assert needs(heartbeat) == {"%RETRY%cg": SUB, "T1": SUB, "T2": SUB}
    with pytest.raises(AccessDenied) as bad_body:
        needs(RemotingCommand.request(RequestCode.HEART_BEAT, {}, b"{not json"))
    assert bad_body.value.remark.endswith("PlainAccessValidator.parse(PlainAccessValidator.java:134)")
    assert needs(RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {"clientID": "c"})) == {}
    assert needs(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {})) == {}


def test_unique_key_query_signed_either_way(home: Path) -> None:
    """4.9.x clients sign _UNIQUE_KEY_QUERY, 4.9.x brokers leave it out: both signatures pass."""
    manager = PlainPermissionManager(str(home))
    query = {"topic": "topicB", "key": "k", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": "1"}
    signed_with = signed(RemotingCommand.request(RequestCode.QUERY_MESSAGE, {**query, "_UNIQUE_KEY_QUERY": "true"}))
    check(manager, signed_with)
    without = signed(RemotingCommand.request(RequestCode.QUERY_MESSAGE, dict(query)))
    assert without.ext_fields is not None
    without.ext_fields["_UNIQUE_KEY_QUERY"] = "true"
    check(manager, without)


def test_hot_reload_and_broken_file(home: Path) -> None:
    clock = Clock()
    manager = PlainPermissionManager(str(home), clock=clock, watch_interval=1.0)
    manager.start()
    try:
        path = home / "conf" / "plain_acl.yml"
        data = yaml.safe_load(path.read_text())
        data["accounts"].append({"accessKey": "new-user1", "secretKey": "new-secret", "defaultTopicPerm": "PUB"})
        path.write_text(yaml.safe_dump(data))
        clock.advance(1.0)
        assert "new-user1" in manager.snapshot.accounts
        good = manager.snapshot
        with capturedLogs() as events:
            path.write_text("accounts: [ {accessKey: broken")
            clock.advance(1.0)
        assert manager.snapshot is good
        assert any("not reloaded" in str(e.get("log_format")) for e in events)
        # Fixed again: loaded again.
        path.write_text(yaml.safe_dump(data | {"globalWhiteRemoteAddresses": ["127.0.0.1"]}))
        clock.advance(1.0)
        assert manager.snapshot.globally_white(LOOPBACK)
    finally:
        manager.stop()


def test_updates_are_written_and_take_effect(home: Path) -> None:
    manager = PlainPermissionManager(str(home))
    path = home / "conf" / "plain_acl.yml"
    manager.update_access_config(
        PlainAccessConfig("new-user1", "new-secret", "10.0.0.*", False, "PUB", "SUB", ["t1=SUB"], ["g1=PUB"])
    )
    data = yaml.safe_load(path.read_text())
    added = data["accounts"][-1]
    assert added == {
        "accessKey": "new-user1",
        "secretKey": "new-secret",
        "whiteRemoteAddress": "10.0.0.*",
        "admin": False,
        "defaultTopicPerm": "PUB",
        "defaultGroupPerm": "SUB",
        "topicPerms": ["t1=SUB"],
        "groupPerms": ["g1=PUB"],
    }
    assert data["dataVersion"][0]["counter"] == 1
    assert data["globalWhiteRemoteAddresses"] == ["10.10.103.*", "192.168.0.*"]
    assert manager.snapshot.accounts["new-user1"].resource_perms == {"t1": SUB, "%RETRY%g1": PUB}
    # Changing an existing account keeps what the request leaves out.
    manager.update_access_config(PlainAccessConfig("RocketMQ", "12345678", default_topic_perm="SUB"))
    rocketmq = manager.snapshot.accounts["RocketMQ"]
    assert rocketmq.resource_perms["topicB"] == PUB | SUB and rocketmq.default_topic_perm == SUB
    assert manager.snapshot.data_versions[str(path)].counter == 2
    assert manager.delete_access_config("new-user1")
    assert "new-user1" not in manager.snapshot.accounts
    assert not manager.delete_access_config("new-user1")
    assert manager.update_global_white_addrs(["127.0.0.1", "10.*.*.*"])
    assert manager.snapshot.globally_white(LOOPBACK)
    assert not manager.update_global_white_addrs(["1.2.3.4"], str(home / "conf" / "broker.conf"))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (PlainAccessConfig("new-user2", "short"), "cannot be null and length should longer than 6"),
        (PlainAccessConfig("new-user3", "newsecret3", topic_perms=["t1=XYZ"]), "expected permissions"),
        (PlainAccessConfig("new-user4", "newsecret4", white_remote_address="300.1.1.1"), "Netaddress"),
    ],
)
def test_refused_updates_change_nothing(home: Path, config: PlainAccessConfig, message: str) -> None:
    manager = PlainPermissionManager(str(home))
    before = (home / "conf" / "plain_acl.yml").read_text()
    with pytest.raises(AclError, match=message):
        manager.update_access_config(config)
    assert (home / "conf" / "plain_acl.yml").read_text() == before


def test_java_split() -> None:
    assert java_split(None) is None
    assert java_split("") == [""]
    assert java_split("a,b,,") == ["a", "b"]
    assert java_split(",a") == ["", "a"]
