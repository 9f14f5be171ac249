"""The authorizer core: Kafka's matching rules, as examples and as properties checked against
a direct reading of the rules (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from brook.security.acls import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclFilter,
    Authorizer,
    Operation as Op,
    PatternType as PT,
    Permission,
    ResourceType as RT,
    bitfield,
    parse_super_users,
)
from tests.support.examples import examples

ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(name="t", op=Op.READ, perm=ALLOW, principal=ALICE, host="*", rt=RT.TOPIC, pt=PT.LITERAL):
    return AclBinding(rt, name, pt, principal, host, op, perm)


def test_nothing_is_allowed_without_acls_unless_allow_everyone_if_no_acl_found():
    assert not Authorizer().authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")
    assert Authorizer(allow_if_no_acl=True).authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")


def test_allow_everyone_applies_only_to_resources_with_no_acl_of_anyone():
    a = Authorizer(allow_if_no_acl=True, bindings=[acl(principal=BOB)])
    assert not a.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")  # bob's ACL covers t
    assert a.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "other")


def test_super_users_may_do_anything_even_against_a_deny():
    a = Authorizer(parse_super_users(" User:admin ; User:broker"),
                   bindings=[acl(principal="User:*", perm=DENY, op=Op.ALL)])
    assert a.authorize("User:admin", HOST, Op.DELETE, RT.TOPIC, "t")
    assert a.authorize("User:broker", HOST, Op.CLUSTER_ACTION, RT.CLUSTER, CLUSTER_NAME)
    assert not a.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")


def test_deny_wins_over_allow():
    a = Authorizer(bindings=[acl(op=Op.ALL), acl(op=Op.WRITE, perm=DENY)])
    assert a.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")
    assert not a.authorize(ALICE, HOST, Op.WRITE, RT.TOPIC, "t")


def test_implied_operations():
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        a = Authorizer(bindings=[acl(op=op)])
        assert a.authorize(ALICE, HOST, Op.DESCRIBE, RT.TOPIC, "t"), op
        assert not a.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, RT.TOPIC, "t"), op
    a = Authorizer(bindings=[acl(op=Op.ALTER_CONFIGS)])
    assert a.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, RT.TOPIC, "t")
    assert not a.authorize(ALICE, HOST, Op.DESCRIBE, RT.TOPIC, "t")
    # Describe implies nothing; a DENY of Read does not deny Describe
    assert not Authorizer(bindings=[acl(op=Op.DESCRIBE)]).authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")
    a = Authorizer(bindings=[acl(op=Op.ALL), acl(op=Op.READ, perm=DENY)])
    assert a.authorize(ALICE, HOST, Op.DESCRIBE, RT.TOPIC, "t")


def test_patterns_literal_prefixed_and_wildcard():
    a = Authorizer(bindings=[acl(name="orders-", pt=PT.PREFIXED), acl(name="exact"),
                             acl(name="*", principal=BOB)])
    assert a.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "orders-eu")
    assert not a.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "orders")
    assert a.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "exact")
    assert not a.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "exact2")
    assert a.authorize(BOB, HOST, Op.READ, RT.TOPIC, "anything")
    assert not a.authorize(BOB, HOST, Op.READ, RT.GROUP, "anything")  # types do not mix
    # "*" as a PREFIXED name is a plain prefix, not a wildcard
    prefixed_star = Authorizer(bindings=[acl(name="*", pt=PT.PREFIXED)])
    assert not prefixed_star.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")


def test_wildcard_principal_and_hosts():
    a = Authorizer(bindings=[acl(principal="User:*", host=HOST)])
    assert a.authorize(BOB, HOST, Op.READ, RT.TOPIC, "t")
    assert not a.authorize(BOB, "10.0.0.2", Op.READ, RT.TOPIC, "t")


def test_authorized_operations_bitfield():
    a = Authorizer(bindings=[acl(op=Op.WRITE), acl(op=Op.ALTER_CONFIGS)])
    ops = a.authorized_operations(ALICE, HOST, RT.TOPIC, "t")
    assert ops == bitfield([Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS])
    assert ops == (1 << 4) | (1 << 8) | (1 << 11) | (1 << 10)
    assert Authorizer(frozenset({ALICE})).authorized_operations(ALICE, HOST, RT.GROUP, "g") == \
        bitfield(SUPPORTED_OPERATIONS[RT.GROUP])


def test_authorize_any_resource_of_a_type():
    prefixed = Authorizer(bindings=[acl(op=Op.WRITE, name="x-", pt=PT.PREFIXED)])
    assert prefixed.authorize_any(ALICE, HOST, Op.WRITE, RT.TOPIC)
    # a DENY of a shorter prefix takes the ALLOW back; of the wildcard, everything
    assert not Authorizer(bindings=[acl(op=Op.WRITE, name="x-a", pt=PT.PREFIXED),
                                    acl(op=Op.WRITE, name="x-", pt=PT.PREFIXED, perm=DENY)]
                          ).authorize_any(ALICE, HOST, Op.WRITE, RT.TOPIC)
    assert not Authorizer(bindings=[acl(op=Op.WRITE, name="*"), acl(op=Op.WRITE, name="*", perm=DENY)]
                          ).authorize_any(ALICE, HOST, Op.WRITE, RT.TOPIC)
    assert not Authorizer(bindings=[acl(op=Op.READ)]).authorize_any(ALICE, HOST, Op.WRITE, RT.TOPIC)


def test_invalid_bindings():
    assert acl().invalid_reason() is None
    assert acl(rt=RT.ANY).invalid_reason()
    assert acl(pt=PT.MATCH).invalid_reason()
    assert acl(op=Op.ANY).invalid_reason()
    assert acl(perm=Permission.ANY).invalid_reason()
    assert acl(name="").invalid_reason()
    assert acl(principal="alice").invalid_reason()
    assert acl(rt=RT.CLUSTER, name="c").invalid_reason()
    assert acl(rt=RT.CLUSTER, name=CLUSTER_NAME).invalid_reason() is None


def test_filters():
    lit, pre, wild = acl(name="orders"), acl(name="ord", pt=PT.PREFIXED), acl(name="*")
    other = acl(name="x", principal=BOB, op=Op.WRITE, perm=DENY)
    everything = [lit, pre, wild, other]
    assert [b for b in everything if AclFilter().matches(b)] == everything
    match = AclFilter(name="orders", pattern_type=PT.MATCH)
    assert [b for b in everything if match.matches(b)] == [lit, pre, wild]
    assert [b for b in everything if AclFilter(name="orders").matches(b)] == [lit]
    assert [b for b in everything if AclFilter(pattern_type=PT.PREFIXED).matches(b)] == [pre]
    assert [b for b in everything if AclFilter(principal=BOB).matches(b)] == [other]
    assert [b for b in everything if AclFilter(permission=DENY, operation=Op.WRITE).matches(b)] == [other]
    assert AclFilter(operation=Op.UNKNOWN).invalid_reason()


def test_add_remove_and_json():
    a = Authorizer()
    assert a.add(acl()) and not a.add(acl())
    assert AclBinding.from_json(acl(pt=PT.PREFIXED).to_json()) == acl(pt=PT.PREFIXED)
    assert list(a.bindings()) == [acl()]
    assert a.remove(acl()) and not a.remove(acl())
    assert list(a.bindings()) == []


# ------------------------------------------------------------------ properties

NAMES = st.sampled_from(["a", "ab", "abc", "b", "*"])
PRINCIPALS = st.sampled_from([ALICE, BOB, "User:*"])
HOSTS = st.sampled_from(["*", "10.0.0.1", "10.0.0.2"])
OPS = st.sampled_from([op for op in Op if op not in (Op.UNKNOWN, Op.ANY)])
bindings = st.builds(AclBinding, st.sampled_from([RT.TOPIC, RT.GROUP]), NAMES,
                     st.sampled_from([PT.LITERAL, PT.PREFIXED]), PRINCIPALS, HOSTS, OPS,
                     st.sampled_from([ALLOW, DENY]))


def _reference(acls, super_users, allow_if_none, principal, host, op, rt, name) -> bool:
    """The rules read directly, over a plain list."""
    if principal in super_users:
        return True

    def covers(b):
        if b.resource_type != rt:
            return False
        if b.pattern_type == PT.LITERAL:
            return b.name == name or b.name == "*"
        return name.startswith(b.name)

    relevant = [b for b in acls if covers(b)]
    if not relevant:
        return allow_if_none
    mine = [b for b in relevant if b.principal in (principal, "User:*") and b.host in (host, "*")]
    if any(b.permission == DENY and b.operation in (op, Op.ALL) for b in mine):
        return False
    implied = {op, Op.ALL}
    if op == Op.DESCRIBE:
        implied |= {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}
    if op == Op.DESCRIBE_CONFIGS:
        implied |= {Op.ALTER_CONFIGS}
    return any(b.permission == ALLOW and b.operation in implied for b in mine)


@settings(max_examples=examples(400), deadline=None)
@given(st.lists(bindings, max_size=8), st.booleans(), st.booleans(),
       st.sampled_from([ALICE, BOB]), st.sampled_from(["10.0.0.1", "10.0.0.2"]), OPS,
       st.sampled_from([RT.TOPIC, RT.GROUP]), st.sampled_from(["a", "ab", "abc", "b", "c"]))
def test_decisions_follow_the_rules(acls, alice_super, allow_if_none, principal, host, op, rt, name):
    supers = frozenset({ALICE}) if alice_super else frozenset()
    a = Authorizer(supers, allow_if_none, acls)
    assert a.authorize(principal, host, op, rt, name) == _reference(acls, supers, allow_if_none,
                                                                      principal, host, op, rt, name)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(bindings, max_size=8), bindings, st.sampled_from([ALICE, BOB]), OPS,
       st.sampled_from(["a", "ab", "c"]))
def test_a_deny_never_grants_and_an_allow_never_takes_away(acls, extra, principal, op, name):
    before = Authorizer(bindings=acls).authorize(principal, HOST, op, extra.resource_type, name)
    after = Authorizer(bindings=acls + [extra]).authorize(principal, HOST, op, extra.resource_type, name)
    if extra.permission == DENY:  # (with allow.everyone.if.no.acl.found off)
        assert not (after and not before)
    else:
        assert not (before and not after)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(bindings, max_size=10), st.sampled_from([ALICE, BOB]), OPS,
       st.sampled_from([RT.TOPIC, RT.GROUP]))
def test_authorize_any_is_true_when_some_resource_is_authorized(acls, principal, op, rt):
    """If some named resource is authorized, the by-type check agrees (it may be generous
    beyond that, as Kafka's is for names no resource has)."""
    a = Authorizer(bindings=acls)

    def direct_allow_covers(n):  # by-type looks at ALLOWs of op itself or All only
        return any(b.permission == ALLOW and b.operation in (op, Op.ALL) and b.resource_type == rt
                   and b.principal in (principal, "User:*") and b.host in (HOST, "*")
                   and (b.name in (n, "*") if b.pattern_type == PT.LITERAL else n.startswith(b.name))
                   for b in acls)

    for n in ["a", "ab", "abc", "b", "zzz"]:
        if a.authorize(principal, HOST, op, rt, n) and direct_allow_covers(n):
            assert a.authorize_any(principal, HOST, op, rt)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(bindings, max_size=8), st.builds(
    AclFilter, st.sampled_from([RT.ANY, RT.TOPIC, RT.GROUP]), st.one_of(st.none(), NAMES),
    st.sampled_from([PT.ANY, PT.MATCH, PT.LITERAL, PT.PREFIXED]), st.one_of(st.none(), PRINCIPALS),
    st.one_of(st.none(), HOSTS), st.one_of(st.just(Op.ANY), OPS),
    st.sampled_from([Permission.ANY, ALLOW, DENY])))
def test_removing_what_a_filter_matches_leaves_exactly_the_rest(acls, f):
    a = Authorizer(bindings=acls)
    matched = a.matching(f)
    for b in matched:
        assert a.remove(b)
    assert set(a.bindings()) == {b for b in acls if not f.matches(b)}
    assert not a.matching(f)
