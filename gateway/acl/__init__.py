"""PLAIN ACL (RocketMQ 4.x ACL 1.0): plain_acl.yml accounts, signed requests, per-resource permissions.

``PlainPermissionManager`` holds the files' accounts and checks requests; ``PlainAccessValidator`` is the
broker's pre-request hook; ``AclAdminProcessor`` serves mqadmin's ACL requests; ``NamesrvAcl`` guards a
NameServer's writes; ``SessionCredentials`` signs a client's requests.
"""
