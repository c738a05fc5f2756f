import pytest

from gateway.dledger.config import DLedgerConfig, DLedgerConfigError, parse_peers
from gateway.dledger.store import DLedgerStoreConfig


def test_peers_parse_in_order():
    assert parse_peers("n0-127.0.0.1:40911;n1-127.0.0.1:40912; n2-localhost:40913;") == {
        "n0": "127.0.0.1:40911",
        "n1": "127.0.0.1:40912",
        "n2": "localhost:40913",
    }


@pytest.mark.parametrize(
    ("peers", "message"),
    [
        ("n0-127.0.0.1", "dLegerPeers: 'n0-127.0.0.1' is not id-host:port"),
        ("n0-127.0.0.1:0", "dLegerPeers: 'n0-127.0.0.1:0' is not id-host:port"),
        ("n0-127.0.0.1:1;n0-127.0.0.1:2", "dLegerPeers: member n0 is listed twice"),
        (";", "dLegerPeers: no member listed"),
    ],
)
def test_bad_peers_name_the_key(peers, message):
    with pytest.raises(DLedgerConfigError, match=message):
        parse_peers(peers)


def test_self_and_preferred_leader_must_be_members(tmp_path):
    peers = parse_peers("n0-127.0.0.1:40911;n1-127.0.0.1:40912")
    store = DLedgerStoreConfig(store_base_dir=str(tmp_path), self_id="n0")
    config = DLedgerConfig(group="g", self_id="n1", peers=peers, store=store)
    assert config.self_addr == "127.0.0.1:40912"
    with pytest.raises(DLedgerConfigError, match="dLegerSelfId: 'n5' is not one of the members of dLegerPeers"):
        DLedgerConfig(group="g", self_id="n5", peers=peers, store=store)
    with pytest.raises(DLedgerConfigError, match="preferredLeaderId: 'n7' is not one"):
        DLedgerConfig(group="g", self_id="n0", peers=peers, store=store, preferred_leader_ids=["n7"])
