"""AclSigner and AclClientRPCHook: the request signature RocketMQ's clients send, computed and checked.

Signature = Base64(HmacSHA1(secretKey, content)), where content is the UTF-8 of every extFields value
(``Signature`` excepted) in key order, followed by the body. The client adds ``AccessKey`` (and
``SecurityToken``) before signing, so they are signed too. The C++ client and ali-ons also add
``OnsChannel``; it is an ext field like any other.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.remoting.command import RemotingCommand

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"


def java_sorted(keys: Iterable[str]) -> list[str]:
    """Keys in Java's String order (UTF-16 code units), as a TreeMap holds them."""
    keys = list(keys)
    if "".join(keys).isascii():
        keys.sort()
        return keys
    return sorted(keys, key=lambda k: k.encode("utf-16-be", "surrogatepass"))


def request_content(ext_fields: Mapping[str, str] | None, skip: Iterable[str] = ()) -> bytes:
    """AclUtils.combineRequestContent without the body: the values in key order, ``Signature`` and ``skip`` left out."""
    if not ext_fields:
        return b""
    left_out = {SIGNATURE, *skip}
    text = "".join([ext_fields[k] for k in java_sorted(ext_fields) if k not in left_out])
    # Java's getBytes(UTF_8) writes '?' for what UTF-8 cannot encode (lone surrogates).
    return text.encode("utf-8", "replace")


class AclSigner:
    """HMAC-SHA1 keyed with one secret, reused for many requests (the key is prepared once)."""

    __slots__ = ("_mac",)

    def __init__(self, secret_key: str) -> None:
        self._mac = hmac.new(secret_key.encode(), digestmod=hashlib.sha1)

    def signature(self, content: bytes, body: bytes = b"") -> str:
        """Base64 of HMAC-SHA1 over ``content`` then ``body``."""
        mac = self._mac.copy()
        mac.update(content)
        if body:
            mac.update(body)
        return base64.b64encode(mac.digest()).decode("ascii")


def cal_signature(secret_key: str, content: bytes, body: bytes = b"") -> str:
    """AclSigner.calSignature: the signature of ``content`` + ``body`` with ``secret_key``."""
    return AclSigner(secret_key).signature(content, body)


@dataclass(frozen=True)
class SessionCredentials:
    """An access key, its secret and an optional security token (SessionCredentials)."""

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __repr__(self) -> str:
        return f"SessionCredentials(access_key={self.access_key!r}, secret_key='***')"

    def sign(self, request: RemotingCommand) -> None:
        """AclClientRPCHook.doBeforeRequest: add AccessKey (and SecurityToken), then Signature."""
        ext = request.ext_fields
        if ext is None:
            ext = request.ext_fields = {}
        ext[ACCESS_KEY] = self.access_key
        if self.security_token is not None:
            ext[SECURITY_TOKEN] = self.security_token
        ext[SIGNATURE] = cal_signature(self.secret_key, request_content(ext), request.body)
