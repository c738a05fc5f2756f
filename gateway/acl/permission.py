"""Permission: ACL permission bits, their names in plain_acl.yml, and the request codes only admins may send."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.remoting.codes import RequestCode

DENY = 1
ANY = 1 << 1
PUB = 1 << 2
SUB = 1 << 3

_BY_NAME = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}

# Permission.ADMIN_CODE (4.9): creating/deleting topics and groups, changing broker config; as later
# versions do, ACL management (4.9 lets any account with a valid signature make itself admin); and ours,
# requests that delete stored data or put messages back (4.9 lets any signed account run them).
ADMIN_CODES = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
        RequestCode.DELETE_ACL_CONFIG,
        RequestCode.GET_BROKER_CLUSTER_ACL_INFO,
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG,
        RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE,
        RequestCode.DELETE_EXPIRED_COMMITLOG,
        RequestCode.CLEAN_UNUSED_TOPIC,
        RequestCode.RESUME_CHECK_HALF_MESSAGE,
    }
)

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"


class AclError(Exception):
    """Java's AclException: a denied request, or an ACL setting that cannot be used."""


def parse_perm(text: object) -> int:
    """``PUB``, ``SUB``, ``PUB|SUB``, ``SUB|PUB`` or ``DENY``; anything else (or nothing) is DENY."""
    if text is None:
        return DENY
    return _BY_NAME.get(str(text).strip(), DENY)


def check_permission(needed: int, owned: int) -> bool:
    """Whether ``owned`` grants ``needed``: never with DENY; ANY is granted by PUB or SUB."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def retry_topic(group: str | None) -> str | None:
    """A group's resource name: its retry topic (``%RETRY%group``)."""
    return None if group is None else RETRY_GROUP_TOPIC_PREFIX + group


def is_retry_topic(resource: str | None) -> bool:
    return resource is not None and resource.startswith(RETRY_GROUP_TOPIC_PREFIX)


def _split(entry: str) -> list[str]:
    # StringUtils.split drops empty tokens: "a==PUB" is two items.
    return [p for p in entry.split("=") if p]


def parse_resource_perms(entries: Iterable[object] | None, is_topic: bool) -> dict[str, int]:
    """``topicPerms`` / ``groupPerms`` entries (``name=PERM``) as resource -> bits; groups as retry topics."""
    perms: dict[str, int] = {}
    for entry in entries or ():
        items = _split(str(entry))
        if len(items) != 2:
            kind = "topic" if is_topic else "group"
            raise AclError(f"Parse resource permission failed for {kind}:{entry}")
        name = items[0].strip()
        perms[name if is_topic else RETRY_GROUP_TOPIC_PREFIX + name] = parse_perm(items[1])
    return perms


def check_resource_perms(entries: Iterable[str] | None) -> None:
    """Reject entries an admin request may not write (Permission.checkResourcePerms)."""
    for entry in entries or ():
        items = _split(entry)
        if len(items) != 2:
            raise AclError(
                f"Parse Resource format error for {entry}.\n"
                "The expected resource format is 'Res=Perm'. For example: topicA=SUB"
            )
        perm = items[1].strip()
        if perm != "DENY" and parse_perm(perm) == DENY:
            raise AclError(
                f"Parse resource permission error for {entry}.\n"
                "The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB'."
            )


def describe(resource: str) -> str:
    """How a denial names a resource: ``topic:T`` or ``group:G`` (PlainAccessResource.printStr)."""
    if is_retry_topic(resource):
        return "group:" + resource[len(RETRY_GROUP_TOPIC_PREFIX) :]
    return "topic:" + resource
