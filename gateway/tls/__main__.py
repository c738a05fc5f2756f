"""``python -m gateway.tls certs DIR``: a CA, a server and a client certificate for a test or dev setup.

Writes ``ca.pem``/``ca.key``, ``server.pem``/``server.key``, ``client.pem``/``client.key`` (PKCS#8 keys,
as Java's Netty reads them) and two snippets with the matching ``tls.*`` keys: ``tls-server.properties``
(append it to broker.conf / namesrv.properties) and ``tls-client.properties`` (a client's settings, or
a broker's own links to its NameServers).
"""

from __future__ import annotations

import argparse

from .certs import write_dev_pki


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway.tls", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    certs = sub.add_parser("certs", help="make a CA and server/client certificates")
    certs.add_argument("directory")
    certs.add_argument(
        "--host",
        action="append",
        dest="hosts",
        help="a name or IP address the server certificate covers (repeat; default localhost and 127.0.0.1)",
    )
    certs.add_argument("--key-password", help="encrypt the server and client keys with this password")
    args = parser.parse_args(argv)
    pki = write_dev_pki(args.directory, args.hosts or ("localhost", "127.0.0.1"), args.key_password)
    for name in (
        "ca.pem",
        "server.pem",
        "server.key",
        "client.pem",
        "client.key",
        "tls-server.properties",
        "tls-client.properties",
    ):
        print(pki.path(name))


if __name__ == "__main__":
    main()
