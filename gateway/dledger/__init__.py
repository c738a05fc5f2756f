"""DLedger (openmessaging/dledger 0.3.1.2, as Apache RocketMQ 4.9.8 ships it): the Raft-replicated commitlog.

Sans-IO pieces first: :mod:`.codes` (request and response codes), :mod:`.entry` (the data- and index-file entry
layouts) and :mod:`.protocol` (the fastjson bodies of the peer RPCs); then :mod:`.store`, the data, index and checkpoint
files; then the member on the reactor: :mod:`.member_state` (role, term, vote), :mod:`.rpc` (the RPCs on remoting),
:mod:`.elector` (votes, heartbeats, leadership transfer), :mod:`.pusher` (replication) and :mod:`.server`
(``DLedgerServer``, the service that runs them).
"""
