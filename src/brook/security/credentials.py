"""The SCRAM credentials of users, as AlterUserScramCredentials changes them: Kafka's checks
and error messages over a store of user -> mechanism -> credential text (the broker's
metadata on a single node). Sans-I/O apart from the store's ``set(user, credentials)``."""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from .scram import BY_TYPE, MAX_ITERATIONS, MIN_ITERATIONS, Credential, Mechanism, credential_from_salted


@dataclass(frozen=True, slots=True)
class Upsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class Deletion:
    user: str
    mechanism: int


def lookup(users: dict[str, dict[str, str]], user: str, mechanism: Mechanism) -> Credential | None:
    text = users.get(user, {}).get(mechanism.name)
    if text is None:
        return None
    try:
        return Credential.from_kafka(text)
    except ValueError:
        return None


def describe(users: dict[str, dict[str, str]], names: list[str] | None):
    """(user, error, message, [(mechanism type, iterations)]) for `names` (every user with
    credentials if None), with Kafka's errors for unknown and repeated names."""
    if names is None:
        names = sorted(users)
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    out = []
    for name in dict.fromkeys(names):
        if counts[name] > 1:
            out.append((name, ErrorCode.duplicate_resource,
                        "Cannot describe SCRAM credentials for the same user twice in a single request", []))
            continue
        infos = []
        for m in sorted(BY_TYPE.values(), key=lambda m: m.type):
            cred = lookup(users, name, m)
            if cred is not None:
                infos.append((m.type, cred.iterations))
        if not infos:
            out.append((name, ErrorCode.resource_not_found,
                        f"Attempt to describe a user credential that does not exist: {name}", []))
        else:
            out.append((name, ErrorCode.none, None, infos))
    return out


def alter(users: dict[str, dict[str, str]], deletions: list[Deletion], upsertions: list[Upsertion]):
    """(results, changes): results is [(user, error, message)] in the order of the users'
    first appearance; changes is user -> its new credentials ({} to remove the user), only
    for users without an error. Kafka refuses a user's whole alteration if any part fails."""
    order: dict[str, None] = {}
    errors: dict[str, tuple[ErrorCode, str]] = {}
    seen: dict[tuple[str, int], int] = {}

    def fail(user: str, code: ErrorCode, message: str) -> None:
        errors.setdefault(user, (code, message))

    for op in [*deletions, *upsertions]:
        order[op.user] = None
        seen[(op.user, op.mechanism)] = seen.get((op.user, op.mechanism), 0) + 1
    for (user, _), count in seen.items():
        if count > 1:
            fail(user, ErrorCode.duplicate_resource,
                 "A user credential cannot be altered twice in the same request")
    for op in [*deletions, *upsertions]:
        if not op.user:
            fail(op.user, ErrorCode.unacceptable_credential, "Username must not be empty")
        elif op.mechanism not in BY_TYPE:
            fail(op.user, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    for op in upsertions:
        if op.iterations < MIN_ITERATIONS:
            fail(op.user, ErrorCode.unacceptable_credential, "Too few iterations")
        elif op.iterations > MAX_ITERATIONS:
            fail(op.user, ErrorCode.unacceptable_credential, "Too many iterations")
        elif not op.salt or not op.salted_password:
            fail(op.user, ErrorCode.unacceptable_credential, "Salt and salted password must not be empty")
    for op in deletions:
        if op.mechanism in BY_TYPE and BY_TYPE[op.mechanism].name not in users.get(op.user, {}):
            fail(op.user, ErrorCode.resource_not_found,
                 "Attempt to delete a user credential that does not exist")
    changes: dict[str, dict[str, str]] = {}
    for user in order:
        if user in errors:
            continue
        creds = dict(users.get(user, {}))
        for d in deletions:
            if d.user == user:
                creds.pop(BY_TYPE[d.mechanism].name, None)
        for u in upsertions:
            if u.user == user:
                m = BY_TYPE[u.mechanism]
                creds[m.name] = credential_from_salted(m, u.salted_password, u.salt, u.iterations).to_kafka()
        changes[user] = creds
    results = [(user, *errors.get(user, (ErrorCode.none, None))) for user in order]
    return results, changes
