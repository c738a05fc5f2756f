"""Issue 27 item 1: DLedger mode's broker.conf keys (Apache's names, DLedger 0.3.1.2's defaults) and the one-line
refusals of values that cannot make a member."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.broker.config import BrokerConfig, dledger_config, load_broker_config
from gateway.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
GROUP = [
    "enableDLegerCommitLog=true",
    "dLegerGroup=broker-a",
    "dLegerPeers=n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913",
    "dLegerSelfId=n1",
]


def _conf(tmp_path: Path, *lines: str) -> Path:
    conf = tmp_path / "broker.conf"
    conf.write_text("\n".join([f"storePathRootDir={tmp_path / 'store'}", *lines]) + "\n")
    return conf


def test_keys_map_onto_the_member_config_with_dledgers_defaults(tmp_path: Path) -> None:
    conf = _conf(
        tmp_path,
        *GROUP,
        "preferredLeaderId=n2",
        "enableBatchPush=true",
        "maxWaitAckTimeMs=700",
        "heartBeatTimeIntervalMs=200",
        "mappedFileSizeCommitLog=4096000",
    )
    broker, store = load_broker_config(str(conf))
    # BrokerStartup: -1 until elected; as a slave n1 registers as brokerId 2 (DLedgerCommitLog.getId).
    assert broker.brokerId == -1 and broker.dledger_broker_id == 2
    member = dledger_config(broker, store)
    assert member.group == "broker-a" and member.self_id == "n1"
    assert member.peers == {"n0": "127.0.0.1:40911", "n1": "127.0.0.1:40912", "n2": "127.0.0.1:40913"}
    assert member.self_addr == "127.0.0.1:40912"
    assert member.preferred_leader_ids == ["n2"] and member.enable_batch_push
    assert (member.max_wait_ack_time_ms, member.heart_beat_time_interval_ms) == (700, 200)
    # Untouched timings keep 0.3.1.2's defaults.
    assert (member.max_heart_beat_leak, member.min_vote_interval_ms, member.max_vote_interval_ms) == (3, 300, 1000)
    assert (member.max_pending_requests_num, member.max_push_time_out_ms) == (10000, 1000)
    # The ledger lives under storePathRootDir/dledger-n1, data files as large as commitlog files.
    assert member.store.default_path == str(tmp_path / "store" / "dledger-n1")
    assert member.store.mapped_file_size_for_entry_data == 4096000
    assert member.store.data_path == str(tmp_path / "store" / "dledger-n1" / "data")


def test_store_path_dledger_commitlog_is_the_ledgers_data_directory(tmp_path: Path) -> None:
    # DLedgerConfig.dataStorePath: the data files move, the index and checkpoint stay under dledger-<selfId>.
    conf = _conf(tmp_path, *GROUP, f"storePathDLedgerCommitLog={tmp_path / 'ledger-data'}")
    broker, store = load_broker_config(str(conf))
    member = dledger_config(broker, store)
    assert member.store.data_path == str(tmp_path / "ledger-data")
    assert member.store.default_path == str(tmp_path / "store" / "dledger-n1")


def test_without_dledger_nothing_is_checked_and_the_id_stays() -> None:
    broker, _ = load_broker_config(None, {"dLegerSelfId": "bogus", "brokerRole": "SLAVE", "brokerId": "3"})
    assert not broker.enableDLegerCommitLog and broker.brokerId == 3
    assert BrokerConfig().maxWaitAckTimeMs == 2500 and BrokerConfig().minVoteIntervalMs == 300


@pytest.mark.parametrize(
    ("line", "key", "problem"),
    [
        ("dLegerPeers=n0-127.0.0.1", "dLegerPeers", "'n0-127.0.0.1' is not id-host:port (as in n0-127.0.0.1:40911)"),
        ("dLegerPeers=", "dLegerPeers", "no member listed"),
        ("dLegerSelfId=n7", "dLegerSelfId", "'n7' is not one of the members of dLegerPeers (n0, n1, n2)"),
        ("dLegerSelfId=leader", "dLegerSelfId", "'leader' is not a letter and a number, as n0"),
        ("dLegerGroup=", "dLegerGroup", "must be set with enableDLegerCommitLog=true"),
        ("preferredLeaderId=n0;n9", "preferredLeaderId", "'n9' is not one of the members of dLegerPeers"),
        ("minVoteIntervalMs=5000", "minVoteIntervalMs", "5000 is above maxVoteIntervalMs 1000"),
        ("maxWaitAckTimeMs=0", "maxWaitAckTimeMs", "0 is not at least 1 ms"),
        ("heartBeatTimeIntervalMs=x", "heartBeatTimeIntervalMs", "'x' is not a valid int"),
        (
            "storePathDLedgerCommitLog=/d1,/d2",
            "storePathDLedgerCommitLog",
            "'/d1,/d2' names several directories (','); one directory is supported",
        ),
        (
            "storePathCommitLog=/data/cl\nstorePathDLedgerCommitLog=/data/cl/",
            "storePathDLedgerCommitLog",
            "'/data/cl/' is the commitlog's directory; the ledger's data files need their own",
        ),
    ],
)
def test_a_value_that_cannot_make_a_member_names_key_and_file(
    tmp_path: Path, line: str, key: str, problem: str
) -> None:
    conf = _conf(tmp_path, *GROUP, line)
    with pytest.raises(ConfigError) as caught:
        load_broker_config(str(conf))
    assert str(caught.value).startswith(f"{conf}: key {key}: {problem}")


def test_dledger_and_controller_mode_are_refused_together(tmp_path: Path) -> None:
    conf = _conf(tmp_path, *GROUP, "enableControllerMode=true", "controllerAddr=127.0.0.1:9878")
    with pytest.raises(
        ConfigError,
        match="key enableDLegerCommitLog: enableControllerMode and enableDLegerCommitLog cannot both be true",
    ):
        load_broker_config(str(conf))
    # BrokerStartup checks a slave's id before DLedger's: a SLAVE with brokerId 0 is refused as without DLedger.
    conf = _conf(tmp_path, *GROUP, "brokerRole=SLAVE", "brokerId=0")
    with pytest.raises(ConfigError, match="key brokerId: Slave's brokerId must be > 0"):
        load_broker_config(str(conf))


def _run_broker(tmp_path: Path, conf: Path) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "gateway.broker", "-c", str(conf)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("dLegerSelfId=n3", "key dLegerSelfId: 'n3' is not one of the members of dLegerPeers (n0, n1, n2)"),
        ("dLegerPeers=n0-127.0.0.1:40911;n0-127.0.0.1:40912", "key dLegerPeers: member n0 is listed twice"),
        (
            "storePathDLedgerCommitLog=a,b",
            "key storePathDLedgerCommitLog: 'a,b' names several directories (','); one directory is supported",
        ),
    ],
)
def test_mqbroker_stops_in_one_line(tmp_path: Path, line: str, expected: str) -> None:
    conf = _conf(tmp_path, "listenPort=0", "bindAddress=127.0.0.1", *GROUP, line)
    run = _run_broker(tmp_path, conf)
    assert run.returncode == 1, run
    assert run.stderr.strip().splitlines() == [f"configuration error: {conf}: {expected}"], run
    assert not (tmp_path / "store").exists()


def test_a_busy_dledger_port_is_one_line_and_the_store_is_closed_cleanly(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        conf = _conf(
            tmp_path,
            "listenPort=0",
            "bindAddress=127.0.0.1",
            "enableDLegerCommitLog=true",
            "dLegerGroup=broker-a",
            f"dLegerPeers=n0-127.0.0.1:{port};n1-127.0.0.1:1",
            "dLegerSelfId=n0",
        )
        run = _run_broker(tmp_path, conf)
    assert run.returncode == 1, run
    assert run.stderr.strip().splitlines() == [
        f"configuration error: {conf}: key dLegerPeers: member n0 cannot listen on 127.0.0.1:{port}: "
        "Address already in use"
    ], run
    store = tmp_path / "store"
    assert (store / "checkpoint").exists() and not (store / "abort").exists()
