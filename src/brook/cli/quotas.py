"""`brook quotas`: client quotas of users and client ids (kafka-configs.sh --entity-type users
/ clients), through DescribeClientQuotas and AlterClientQuotas, which confluent-kafka's
AdminClient does not offer (so the requests go as they are, brook.cli.wire)."""

from __future__ import annotations

from typing import Optional

import typer

from . import options, output
from .errors import CliError
from .options import bootstrap_option, timeout_option
from .output import Format, output_option

DESCRIBE, ALTER = 48, 49
#: kafka-configs.sh's entity types -> the protocol's
TYPES = {"users": "user", "clients": "client-id"}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

app = typer.Typer(no_args_is_help=True,
                  help="Client quotas (producer_byte_rate, consumer_byte_rate, request_percentage, "
                       "controller_mutation_rate) of users, client ids and their defaults.")


def _entity_type_option():
    return typer.Option([], "--entity-type", metavar="users|clients",
                        help="users or clients; repeatable (users and clients: a user's client id).")


def _entity_name_option():
    return typer.Option([], "--entity-name", help="The name of each --entity-type, in order.")


def _entity_default_option():
    return typer.Option(0, "--entity-default", count=True,
                        help="The default entity of the --entity-type(s) after those named.")


def _user_option():
    return typer.Option(None, "--user", help="Same as --entity-type users --entity-name.")


def _client_option():
    return typer.Option(None, "--client", help="Same as --entity-type clients --entity-name.")


def _user_defaults_option():
    return typer.Option(False, "--user-defaults", help="The default user.")


def _client_defaults_option():
    return typer.Option(False, "--client-defaults", help="The default client id.")


def entity(types: list[str], names: list[str], defaults: int, user: str | None, client: str | None,
           user_defaults: bool, client_defaults: bool, *, describing: bool = False
           ) -> dict:
    """The entity as the protocol names it: {"user": "alice", "client-id": None (the default)};
    when describing, a type given with neither a name nor --entity-default is `...` (any)."""
    out: dict = {}
    for t in types:
        if t not in TYPES:
            raise CliError(f"unknown entity type {t!r} (use users or clients)", code=2)
    if len(set(types)) != len(types):
        raise CliError("each --entity-type may be given once", code=2)
    if len(names) > len(types):
        raise CliError("more --entity-name than --entity-type", code=2)
    for i, t in enumerate(types):
        if i < len(names):
            out[TYPES[t]] = names[i]
        elif i < len(names) + defaults:
            out[TYPES[t]] = None
        elif describing:
            out[TYPES[t]] = ...
        else:
            raise CliError(f"--entity-type {t} needs an --entity-name or --entity-default", code=2)
    for key, name, default in (("user", user, user_defaults), ("client-id", client, client_defaults)):
        if name is not None or default:
            if key in out:
                raise CliError(f"the {key} is given twice", code=2)
            out[key] = None if default else name
    return out


def _parse_add(values: list[str]) -> dict[str, float]:
    """--add-config 'k=v,k2=v2' (repeatable), as kafka-configs.sh takes it."""
    out: dict[str, float] = {}
    for value in values:
        for item in filter(None, (p.strip() for p in value.split(","))):
            key, sep, number = item.partition("=")
            if not sep:
                raise CliError(f"--add-config takes key=value, not {item!r}", code=2)
            try:
                out[key.strip()] = float(number)
            except ValueError:
                raise CliError(f"the value of {key.strip()} must be a number, not {number!r}",
                               code=2) from None
    return out


def _address(bootstrap: str | None) -> tuple[str, int]:
    from ..client.connection import parse_bootstrap

    try:
        return parse_bootstrap(options.bootstrap(bootstrap))[0]
    except ValueError as exc:
        raise CliError(str(exc), code=2) from None


def request_module(api_key: int, version: int):
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    return load_payload_module(api_key, version, EntityType.request)


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def _name(value) -> str:
    return "<default>" if value is None else value


def quota_rows(host: str, port: int, wanted: dict, timeout: float,
               security=None) -> list[dict]:
    """DescribeClientQuotas of the entities `wanted` ({} for every one; see entity()): a row
    per quota, {"user", "client-id", "quota", "value"} (None: not part of the entity)."""
    from ..protocol.messages import make, request_class
    from .wire import request

    mod = request_module(DESCRIBE, 1)
    components = tuple(
        make(mod.ComponentData, entity_type=t,
             match_type=MATCH_SPECIFIED if n is ... else MATCH_DEFAULT if n is None else MATCH_EXACT,
             match=None if n is ... or n is None else n)
        for t, n in wanted.items())
    response = request(host, port, make(request_class(DESCRIBE, 1), components=components,
                                        strict=bool(wanted)), timeout, security)
    if response.error_code:
        raise CliError(f"cannot describe quotas: {response.error_code.name.upper()}"
                       + (f": {response.error_message}" if response.error_message else ""))
    rows = []
    for entry in response.entries:
        names = {e.entity_type: e.entity_name for e in entry.entity}
        for value in sorted(entry.values, key=lambda v: v.key):
            rows.append({"user": _name(names["user"]) if "user" in names else None,
                         "client-id": _name(names["client-id"]) if "client-id" in names else None,
                         "quota": value.key, "value": value.value})
    rows.sort(key=lambda r: (r["user"] is None, r["user"] or "", r["client-id"] or "", r["quota"]))
    return rows


@app.command("describe")
def describe(
    entity_type: list[str] = _entity_type_option(),
    entity_name: list[str] = _entity_name_option(),
    entity_default: int = _entity_default_option(),
    user: Optional[str] = _user_option(),
    client: Optional[str] = _client_option(),
    user_defaults: bool = _user_defaults_option(),
    client_defaults: bool = _client_defaults_option(),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """The quotas set: every entity's, or (with entity options) those of exactly that entity
    (a type given without a name or default: every entity of that type)."""
    wanted = entity(entity_type, entity_name, entity_default, user, client, user_defaults,
                    client_defaults, describing=True)
    host, port = _address(bootstrap)
    rows = quota_rows(host, port, wanted, options.timeout(timeout))
    if fmt is Format.json:
        output.print_json(rows)
        return
    output.table(("USER", "CLIENT-ID", "QUOTA", "VALUE"),
                 [(r["user"] or "", r["client-id"] or "", r["quota"], _number(r["value"])) for r in rows])


@app.command("alter")
def alter(
    entity_type: list[str] = _entity_type_option(),
    entity_name: list[str] = _entity_name_option(),
    entity_default: int = _entity_default_option(),
    user: Optional[str] = _user_option(),
    client: Optional[str] = _client_option(),
    user_defaults: bool = _user_defaults_option(),
    client_defaults: bool = _client_defaults_option(),
    add_config: list[str] = typer.Option([], "--add-config", metavar="K=V[,K=V]",
                                         help="Quotas to set, e.g. producer_byte_rate=1048576; repeatable."),
    delete_config: list[str] = typer.Option([], "--delete-config", metavar="K[,K]",
                                            help="Quotas to remove; repeatable."),
    validate_only: bool = typer.Option(False, "--validate-only", help="Check, change nothing."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Set or remove quotas of one entity (the others it has stay); they apply at once and
    persist."""
    target = entity(entity_type, entity_name, entity_default, user, client, user_defaults,
                    client_defaults)
    if not target:
        raise CliError("give the entity: --entity-type users|clients with --entity-name NAME or "
                       "--entity-default (or --user/--client/--user-defaults/--client-defaults)", code=2)
    to_set = _parse_add(add_config)
    to_delete = [k for value in delete_config for k in (p.strip() for p in value.split(",")) if k]
    host, port = _address(bootstrap)
    what = alter_quotas(host, port, target, to_set, to_delete, options.timeout(timeout),
                        validate_only=validate_only)
    verb = "Would set" if validate_only else "Set"
    for k, v in to_set.items():
        output.line(f"{verb} {k}={_number(v)} for {what}.")
    for k in to_delete:
        output.line(f"{'Would remove' if validate_only else 'Removed'} {k} from {what}.")


def entity_text(target: dict) -> str:
    """{"user": "alice", "client-id": None} -> "user alice, client-id <default>"."""
    return ", ".join(f"{t} {_name(n)}" for t, n in target.items())


def alter_quotas(host: str, port: int, target: dict, to_set: dict[str, float],
                 to_delete: list[str], timeout: float, security=None,
                 validate_only: bool = False) -> str:
    """AlterClientQuotas of one entity (see entity()): set `to_set`, remove `to_delete`, the
    entity's other quotas untouched. The entity's text; a refusal as a CliError."""
    from ..protocol.messages import make, request_class
    from .wire import request

    if not target:
        raise CliError("give the entity: a user, a client id, or their defaults", code=2)
    if not to_set and not to_delete:
        raise CliError("nothing to change: give --add-config k=v or --delete-config k", code=2)
    if set(to_set) & set(to_delete):
        raise CliError(f"{sorted(set(to_set) & set(to_delete))[0]} is both added and deleted", code=2)
    mod = request_module(ALTER, 1)
    ops = tuple(make(mod.OpData, key=k, value=float(v), remove=False) for k, v in to_set.items()) + tuple(
        make(mod.OpData, key=k, value=0.0, remove=True) for k in to_delete)
    body = make(request_class(ALTER, 1), validate_only=validate_only, entries=(make(
        mod.EntryData, entity=tuple(make(mod.EntityData, entity_type=t, entity_name=n)
                                    for t, n in target.items()), ops=ops),))
    (result,) = request(host, port, body, timeout, security).entries
    what = entity_text(target)
    if result.error_code:
        raise CliError(f"cannot alter the quotas of {what}: {result.error_code.name.upper()}"
                       + (f": {result.error_message}" if result.error_message else ""))
    return what
