"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): users' SCRAM
credentials, kept in the broker's metadata (iterations are shown, never salts or keys)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class, response_module
from ...security import credentials as creds
from ..auth import authz
from ..zookeeper_calls import ZooKeeperUnavailable
from .api import Api
from .common import NO_THROTTLE

DESCRIBE_KEY = 50
ALTER_KEY = 51


async def describe(broker, request, connection):
    v = request.api_version
    mod = response_module(DESCRIBE_KEY, v)
    if broker.authorizer is not None and not authz.cluster_allowed(broker, connection, authz.Op.DESCRIBE):
        return make(response_class(DESCRIBE_KEY, v), throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed, error_message=None, results=())
    users = request.body.users
    names = [u.name for u in users] if users else None  # none or empty: every user (Kafka's)
    results = tuple(
        make(mod.DescribeUserScramCredentialsResult, user=user, error_code=code, error_message=msg,
             credential_infos=tuple(make(mod.CredentialInfo, mechanism=m, iterations=i) for m, i in infos))
        for user, code, msg, infos in creds.describe(broker.user_scram(), names))
    return make(response_class(DESCRIBE_KEY, v), throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                error_message=None, results=results)


async def alter(broker, request, connection):
    v = request.api_version
    mod = response_module(ALTER_KEY, v)
    body = request.body
    if broker.authorizer is not None and not authz.cluster_allowed(broker, connection, authz.Op.ALTER):
        users = dict.fromkeys([d.name for d in body.deletions] + [u.name for u in body.upsertions])
        return make(response_class(ALTER_KEY, v), throttle_time=NO_THROTTLE, results=tuple(
            make(mod.AlterUserScramCredentialsResult, user=user,
                 error_code=ErrorCode.cluster_authorization_failed, error_message=None)
            for user in users))
    results, changes = creds.alter(
        broker.user_scram(),
        [creds.Deletion(d.name, d.mechanism) for d in body.deletions],
        [creds.Upsertion(u.name, u.mechanism, u.iterations, u.salt, u.salted_password)
         for u in body.upsertions])
    if changes:
        try:
            await broker.set_user_scram(changes)
        except ZooKeeperUnavailable as exc:
            results = [(user, ErrorCode.unknown_server_error, str(exc)) if code == ErrorCode.none
                       else (user, code, msg) for user, code, msg in results]
    return make(response_class(ALTER_KEY, v), throttle_time=NO_THROTTLE, results=tuple(
        make(mod.AlterUserScramCredentialsResult, user=user, error_code=code, error_message=msg)
        for user, code, msg in results))


APIS = [
    Api(DESCRIBE_KEY, "DescribeUserScramCredentials", 0, 0, describe),
    Api(ALTER_KEY, "AlterUserScramCredentials", 0, 0, alter),
]
