"""TLS with RocketMQ's settings (``tls.server.mode``, ``tls.enable``, ``tls.server.*``, ``tls.client.*``).

``TlsConfig`` reads the keys; ``TlsServer`` wraps a listening factory (first-byte sniffing, reload on
change); ``client_endpoint_factory`` gives outgoing connections TLS; ``certs`` makes test certificates
(``python -m gateway.tls``).
"""
