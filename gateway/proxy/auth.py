"""The SDKs' AK/SK signatures checked against plain_acl.yml, with the permissions remoting requests need.

An SDK signs each call's ``x-mq-date-time`` header: ``authorization: MQv2-HMAC-SHA1 Credential=<AK>,
SignedHeaders=x-mq-date-time, Signature=<hex of HMAC-SHA1(SK, date-time)>``. Which topic and group a
request touches, and how (PUB, SUB), follows Apache's authorization of gRPC requests; the accounts, white
lists and permission rules are the broker's own (:mod:`gateway.acl`).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from twisted.logger import Logger

from gateway.acl.permission import ANY, PUB, SUB, retry_topic
from gateway.acl.plain_permission_manager import AccessDenied, PlainPermissionManager, check_perm

from .convert import ProxyError
from .service import ProxyContext
from .v2 import definition_pb2 as pb
from .v2 import service_pb2 as spb

log = Logger()

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"


def parse_authorization(value: str) -> tuple[str, str]:
    """(access key, hex signature) of an ``authorization`` header; ProxyError UNAUTHORIZED when malformed."""
    parts = value.split(" ", 1)
    if len(parts) != 2:
        raise ProxyError(pb.Code.UNAUTHORIZED, "authentication header is incorrect.")
    access_key = signature = ""
    for item in parts[1].split(","):
        key, sep, val = item.strip().partition("=")
        if not sep:
            raise ProxyError(pb.Code.UNAUTHORIZED, "authentication keyValues length is incorrect.")
        if key == "Credential":
            access_key = val.split("/")[0]
        elif key == "Signature":
            signature = val
    return access_key, signature


def needed_resources(request: Any) -> dict[str, int]:
    """Topic and group (as its retry topic) permissions a request needs."""
    needs: dict[str, int] = {}

    def topic(resource: Any, perm: int) -> None:
        if resource.name:
            needs[resource.name] = needs.get(resource.name, 0) | perm

    def group(resource: Any) -> None:
        if resource.name:
            needs[retry_topic(resource.name) or ""] = SUB

    if isinstance(request, spb.SendMessageRequest):
        for msg in request.messages[:1]:
            topic(msg.topic, PUB)
    elif isinstance(request, spb.EndTransactionRequest | spb.RecallMessageRequest):
        topic(request.topic, PUB)
    elif isinstance(request, spb.QueryRouteRequest):
        topic(request.topic, ANY)
    elif isinstance(request, spb.HeartbeatRequest | spb.NotifyClientTerminationRequest):
        group(request.group)
    elif isinstance(
        request, spb.ReceiveMessageRequest | spb.PullMessageRequest | spb.UpdateOffsetRequest | spb.GetOffsetRequest
    ):
        group(request.group)
        topic(request.message_queue.topic, SUB)
    elif isinstance(request, spb.QueryOffsetRequest):
        topic(request.message_queue.topic, SUB)
    elif isinstance(
        request,
        spb.AckMessageRequest
        | spb.ForwardMessageToDeadLetterQueueRequest
        | spb.ChangeInvisibleDurationRequest
        | spb.QueryAssignmentRequest,
    ):
        group(request.group)
        topic(request.topic, SUB)
    elif isinstance(request, pb.Settings):
        if request.WhichOneof("pub_sub") == "publishing":
            for t in request.publishing.topics:
                topic(t, PUB)
        elif request.WhichOneof("pub_sub") == "subscription":
            group(request.subscription.group)
            for entry in request.subscription.subscriptions:
                topic(entry.topic, SUB)
    return needs


class AclAuthenticator:
    """Checks each request's signature and permissions against a :class:`PlainPermissionManager`'s accounts."""

    def __init__(self, manager: PlainPermissionManager) -> None:
        self.manager = manager

    def check(self, ctx: ProxyContext, request: Any) -> None:
        try:
            self._check(ctx, request)
        except AccessDenied as e:
            log.warn(
                "ACL denied {rpc} from {peer}: {error}", rpc=type(request).__name__, peer=ctx.remote_address, error=e
            )
            raise ProxyError(pb.Code.UNAUTHORIZED, str(e)) from None

    def _check(self, ctx: ProxyContext, request: Any) -> None:
        acl = self.manager.snapshot
        host = ctx.remote_address.rpartition(":")[0] or ctx.remote_address
        if acl.globally_white(host):
            return
        header = ctx.metadata.get(AUTHORIZATION)
        if not header:
            raise AccessDenied("No accessKey is configured", "gRPC")
        date_time = ctx.metadata.get(DATE_TIME)
        if not date_time:
            raise ProxyError(pb.Code.UNAUTHORIZED, "datetime is null.")
        access_key, signature = parse_authorization(header)
        account = acl.accounts.get(access_key)
        if account is None:
            raise AccessDenied(f"No acl config for {access_key}", "gRPC")
        if account.white_address(host):
            return
        expected = hmac.new(account.secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()
        if not hmac.compare_digest(expected, signature.lower()):
            raise AccessDenied(f"Check signature failed for accessKey={access_key}", "gRPC")
        check_perm(0, needed_resources(request), account, False)
