"""Attack replays: the broker and NameServer fixtures of the other suites, reused."""

from tests.broker.conftest import broker, make_broker, remoting  # noqa: F401
from tests.namesrv.conftest import addr, namesrv, namesrv_config  # noqa: F401
