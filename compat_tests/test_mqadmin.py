"""The official mqadmin against our servers, run when ``ROCKETMQ_MQADMIN_CLASSPATH`` names the tools' jars;
with ``ROCKETMQ_BROKER_CLASSPATH`` (a 4.9.8 distribution's ``lib/*``) too, the same subcommands run against
Apache's NameServer and broker and their output is compared with ours, numbers and addresses aside."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.remoting import fastjson
from gateway.remoting.bodies import ConsumerData, HeartbeatData, SubscriptionData
from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from tests.ha.procs import until

from .apache_broker import CLASSPATH as APACHE_CLASSPATH
from .apache_broker import apache_cluster
from .servers import GatewayServers, call, jdk_tool

MQADMIN_CLASSPATH = os.environ.get("ROCKETMQ_MQADMIN_CLASSPATH", "").strip()
if not MQADMIN_CLASSPATH:
    pytest.skip("mqadmin not given: set ROCKETMQ_MQADMIN_CLASSPATH to its jars", allow_module_level=True)

pytestmark = pytest.mark.compat
TOPIC = "MqadminTopic"
GROUP = "mqadmin_group"


def mqadmin(home: Path, namesrv: str, *args: str) -> str:
    """One mqadmin subcommand; its standard output (the test fails on a non-zero exit)."""
    (home / "conf").mkdir(parents=True, exist_ok=True)
    (home / "conf" / "logback_tools.xml").write_text('<configuration><root level="OFF"/></configuration>\n')
    proc = subprocess.run(
        [jdk_tool("java"), "-Xmx256m", f"-Drocketmq.home.dir={home}", f"-Duser.home={home}",
         "-cp", MQADMIN_CLASSPATH, "org.apache.rocketmq.tools.command.MQAdminStartup", args[0], "-n", namesrv,
         *args[1:]],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, f"mqadmin {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def shape(text: str) -> list[str]:
    """Output with what differs between two runs taken out: addresses, numbers, times, spacing."""
    out = []
    for line in text.splitlines():
        line = re.sub(r"\d+\.\d+\.\d+\.\d+:\d+", "ADDR", line)
        line = re.sub(r"\b[0-9A-F]{32,}\b", "MSGID", line)  # message ids (UNIQ_KEY's length follows the host's IP)
        line = re.sub(r"\d", "9", line)
        line = re.sub(r"9+(\.9+)?", "N", line)
        line = " ".join(line.split())
        if line:
            out.append(line)
    return out


def keys(text: str) -> set[str]:
    """The keys of ``key : value`` (brokerStatus) or ``key = value`` (getBrokerConfig) lines."""
    return {m.group(1) for m in re.finditer(r"^\s*([A-Za-z_][\w.]*)\s*[:=]", text, re.M)}


class Cluster:
    """A NameServer and one broker, ours or Apache's, with a topic, three messages and a group."""

    def __init__(self, namesrv: str, broker: str, home: Path) -> None:
        self.namesrv, self.broker, self.home = namesrv, broker, home

    def prepare(self) -> None:
        self.run("updateTopic", "-c", "DefaultCluster", "-t", TOPIC, "-r", "2", "-w", "2")
        until(lambda: TOPIC in self.run("topicList"), 60, f"{TOPIC} routed")
        for i in range(3):  # both queues get messages, so both show a #Last Updated time
            queue = ["-b", "broker-a", "-i", str(i % 2)]
            self.run("sendMessage", "-t", TOPIC, "-p", f"body-{i}", "-k", f"key-{i}", *queue)
        self.run("updateSubGroup", "-c", "DefaultCluster", "-g", GROUP)
        # consumerProgress reads the group's %RETRY% route: a consumer's heartbeat creates it (both brokers).
        consumer = ConsumerData(GROUP, subscription_data_set=[SubscriptionData(TOPIC)])
        heartbeat = fastjson.dumps(HeartbeatData("127.0.0.1@mqadmin-test", consumer_data_set=[consumer]))
        call(self.broker, RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat, language="JAVA"))
        until(lambda: f"%RETRY%{GROUP}" in self.run("topicList"), 60, "the group's retry topic routed")
        # The group has consumed everything (consumerProgress refuses a group with no offsets at all).
        for queue_id in (0, 1):
            ext = {"topic": TOPIC, "queueId": str(queue_id)}
            end = call(self.broker, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, ext)).ext_fields["offset"]
            commit = {"consumerGroup": GROUP, **ext, "commitOffset": end}
            call(self.broker, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, commit))

    def run(self, *args: str) -> str:
        return mqadmin(self.home, self.namesrv, *args)

    def outputs(self) -> dict[str, str]:
        return {
            "clusterList": self.run("clusterList"),
            "topicRoute": self.run("topicRoute", "-t", TOPIC),
            "topicStatus": self.run("topicStatus", "-t", TOPIC),
            "brokerStatus": self.run("brokerStatus", "-b", self.broker),
            "getBrokerConfig": self.run("getBrokerConfig", "-b", self.broker),
            "queryMsgByKey": self.run("queryMsgByKey", "-t", TOPIC, "-k", "key-1"),
            "printMsg": self.run("printMsg", "-t", TOPIC),
        }


@pytest.fixture
def ours(tmp_path: Path) -> Iterator[Cluster]:
    servers = GatewayServers(tmp_path / "gateway").start()
    cluster = Cluster(servers.namesrv_addr, servers.broker_addr, tmp_path / "mqadmin-ours")
    cluster.prepare()
    yield cluster
    servers.stop()


@pytest.fixture
def apache(tmp_path: Path) -> Iterator[Cluster]:
    if not APACHE_CLASSPATH:
        pytest.skip("Apache broker not given: set ROCKETMQ_BROKER_CLASSPATH to 4.9.8's lib/* jars")
    root = tmp_path / "apache"
    with apache_cluster(root) as (namesrv_addr, broker_addr):
        cluster = Cluster(namesrv_addr, broker_addr, root / "mqadmin")
        cluster.prepare()
        yield cluster


def test_mqadmin_subcommands_against_our_servers(ours: Cluster) -> None:
    out = ours.outputs()
    assert "DefaultCluster" in out["clusterList"] and "broker-a" in out["clusterList"]
    route = fastjson.loads(out["topicRoute"])  # fastjson's output: brokerAddrs has unquoted numeric keys
    assert route["queueDatas"][0]["writeQueueNums"] == 2 and route["brokerDatas"][0]["brokerName"] == "broker-a"
    assert sum(int(n) for n in re.findall(r"^\S+\s+\d+\s+\d+\s+(\d+)", out["topicStatus"], re.M)) == 3
    assert {"msgPutTotalTodayNow", "commitLogDirCapacity", "putTps"} <= keys(out["brokerStatus"])
    assert "brokerName" in keys(out["getBrokerConfig"])
    # QueryMsgByKeySubCommand: a header, then one "msgId queueId offset" line a message.
    assert len(re.findall(r"^[0-9A-F]{32,}\s+\d+\s+\d+\s*$", out["queryMsgByKey"], re.M)) == 1
    # PrintMessageSubCommand: one "MSGID: ... BODY: ..." line a message.
    assert out["printMsg"].count("MSGID:") == 3
    assert "Diff Total: 0" in ours.run("consumerProgress", "-g", GROUP)


def test_mqadmin_output_matches_apache(ours: Cluster, apache: Cluster) -> None:
    mine, theirs = ours.outputs(), apache.outputs()
    # Tables and JSON: the same lines once numbers and addresses are set aside.
    for name in ("clusterList", "topicStatus"):
        assert shape(mine[name]) == shape(theirs[name]), name
    assert fastjson.loads(mine["topicRoute"]).keys() == fastjson.loads(theirs["topicRoute"]).keys()
    # brokerStatus prints every runtime key Apache's broker has (the disk-ratio key carries a path).
    missing = {k for k in keys(theirs["brokerStatus"]) - keys(mine["brokerStatus"]) if not k.startswith("commitLog")}
    assert missing == set()
    assert shape(mine["printMsg"])[:3] == shape(theirs["printMsg"])[:3]
