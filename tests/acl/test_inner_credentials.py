"""innerClientAuthenticationCredentials: a broker signs its own requests (a slave's metadata sync from an
ACL-protected master) as AclClientRPCHook signs them; without it (4.9.8's way) the master refuses a slave
it has not whitelisted. The secret is never printed nor changed remotely."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytest_twisted

from gateway.broker.config import load_broker_config
from gateway.config import ConfigError
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import CreateTopicRequestHeader
from tests.broker.conftest import BrokerUnderTest, remoting  # noqa: F401
from tests.namesrv.conftest import namesrv, namesrv_config  # noqa: F401

from .conftest import ADMIN, USER, signed

CREDENTIALS = json.dumps({"accessKey": USER.access_key, "secretKey": USER.secret_key})


@pytest_twisted.ensureDeferred
async def test_a_signing_slave_syncs_from_an_acl_master_an_unsigned_one_is_refused(
    tmp_path: Path,
    home: Path,
    remoting: RemotingClient,  # noqa: F811
    namesrv,  # noqa: F811
) -> None:
    common = {"namesrvAddr": f"127.0.0.1:{namesrv.port}", "brokerName": "broker-acl-ha"}
    master = BrokerUnderTest(tmp_path / "master", remoting, aclEnable="true", rocketmqHome=str(home), **common)
    signing = BrokerUnderTest(
        tmp_path / "signing",
        remoting,
        brokerRole="SLAVE",
        brokerId="1",
        innerClientAuthenticationCredentials=CREDENTIALS,
        **common,
    )
    unsigned = BrokerUnderTest(tmp_path / "unsigned", remoting, brokerRole="SLAVE", brokerId="2", **common)
    brokers = [master, signing, unsigned]
    try:
        for broker in brokers:
            await broker.start().when_ready()
        header = CreateTopicRequestHeader("AclSyncTopic", "TBW102", 4, 4, 6, "SINGLE_TAG").encode()
        resp = await master.call(signed(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header), ADMIN))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        for slave in (signing, unsigned):
            assert slave.controller is not None
            assert slave.controller.slave_sync.master_addr == master.addr
            await slave.controller.slave_sync.sync_all()
        assert signing.controller is not None and unsigned.controller is not None
        assert "AclSyncTopic" in signing.controller.topics.table
        assert "AclSyncTopic" not in unsigned.controller.topics.table
        # What the master said to the unsigned slave: Apache's refusal.
        resp = await master.call(RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "No accessKey is configured" in resp.remark

        # The secret is neither printed nor remotely changeable.
        resp = await signing.call(RemotingCommand.request(RequestCode.GET_BROKER_CONFIG))
        assert b"innerClientAuthenticationCredentials" not in resp.body and USER.secret_key.encode() not in resp.body
        body = b'innerClientAuthenticationCredentials={"accessKey":"x","secretKey":"y"}\n'
        resp = await signing.call(RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=body))
        assert resp.code == ResponseCode.NO_PERMISSION
    finally:
        for broker in reversed(brokers):
            await broker.stop()


@pytest.mark.parametrize(
    "value", ["not json", '{"accessKey": "ak"}', '["ak", "sk"]', '{"accessKey": 1, "secretKey": "s"}']
)
def test_malformed_credentials_are_a_config_error_naming_the_key_and_file(tmp_path: Path, value: str) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"innerClientAuthenticationCredentials={value}\n")
    with pytest.raises(ConfigError, match=r"broker\.conf: key innerClientAuthenticationCredentials"):
        load_broker_config(str(conf))
