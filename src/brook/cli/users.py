"""`brook users`: SCRAM users (kafka-configs.sh --entity-type users --alter --add-config
'SCRAM-SHA-512=[password=...]'), through AlterUserScramCredentials and
DescribeUserScramCredentials. The password is salted on this side; the broker never sees it."""

from __future__ import annotations

from typing import Optional

import typer

from . import output
from .errors import CliError
from .options import bootstrap_option, timeout_option
from .output import Format, output_option

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")

app = typer.Typer(no_args_is_help=True,
                  help="SCRAM users: list them, set a password (per mechanism), delete them.")


def _mechanism(name: str):
    from confluent_kafka.admin import ScramMechanism

    name = name.upper()
    if name not in MECHANISMS:
        raise CliError(f"unknown mechanism {name!r} (use {' or '.join(MECHANISMS)})", code=2)
    return ScramMechanism[name.replace("-", "_")]


def user_rows(cluster) -> list[tuple[str, str, int]]:
    """(user, mechanism, iterations) of every SCRAM credential; never a salt or a key."""
    from .client import _addresses
    from .wire import describe_scram_users

    host, port = _addresses(cluster.bootstrap)[0]
    return describe_scram_users(host, port, cluster.timeout, cluster.security)


@app.command("list")
def list_users(bootstrap: Optional[str] = bootstrap_option(), timeout: Optional[float] = timeout_option(),
               fmt: Format = output_option()) -> None:
    """Every user with SCRAM credentials: its mechanisms and their iterations (never the
    salts or keys)."""
    from .client import Cluster

    rows = user_rows(Cluster(bootstrap, timeout))
    if fmt == Format.json:
        output.print_json([{"user": u, "mechanism": m, "iterations": i} for u, m, i in rows])
    else:
        output.table(["USER", "MECHANISM", "ITERATIONS"], rows)


@app.command("set-scram")
def set_scram(
    user: str = typer.Argument(..., help="The user name."),
    mechanism: str = typer.Option("SCRAM-SHA-512", "--mechanism", help=" or ".join(MECHANISMS) + "."),
    password: str = typer.Option(..., "--password", prompt=True, hide_input=True,
                                 confirmation_prompt=True, help="Asked for when not given."),
    iterations: int = typer.Option(4096, "--iterations", min=4096, max=16384,
                                   help="PBKDF2 iterations (Kafka's range: 4096-16384)."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Create the user, or change its password, for one SCRAM mechanism."""
    from .client import Cluster

    set_scram_credential(Cluster(bootstrap, timeout), user, mechanism, password, iterations)
    output.note(f"user {user}: {mechanism.upper()} credential set ({iterations} iterations)")


def set_scram_credential(cluster, user: str, mechanism: str, password: str,
                         iterations: int = 4096) -> None:
    """Create the user, or change its password, for one SCRAM mechanism (AlterUserScramCredentials:
    the salted password goes, never the password). A refusal as a CliError naming no secret."""
    from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion

    if not user:
        raise CliError("name the user", code=2)
    if not password:
        raise CliError("the password may not be empty", code=2)
    if not 4096 <= iterations <= 16384:
        raise CliError(f"iterations are 4096 to 16384 (Kafka's range), not {iterations}", code=2)
    upsertion = UserScramCredentialUpsertion(user, ScramCredentialInfo(_mechanism(mechanism), iterations),
                                             password.encode())
    for u, f in cluster.admin.alter_user_scram_credentials([upsertion]).items():
        cluster.wait(f, f"cannot set the {mechanism.upper()} credential of {u}")


def delete_scram_credentials(cluster, user: str, mechanism: str | None = None) -> list[str]:
    """Delete a user's credential of one mechanism, or all of them: the mechanisms deleted."""
    from confluent_kafka.admin import UserScramCredentialDeletion

    if mechanism:
        mechanisms = [_mechanism(mechanism)]
    else:
        mechanisms = [_mechanism(m) for u, m, _ in user_rows(cluster) if u == user]
        if not mechanisms:
            raise CliError(f"user {user} has no SCRAM credentials")
    deletions = [UserScramCredentialDeletion(user, m) for m in mechanisms]
    for u, f in cluster.admin.alter_user_scram_credentials(deletions).items():
        cluster.wait(f, f"cannot delete the credentials of {u}")
    return [m.name.replace("_", "-") for m in mechanisms]


@app.command("delete")
def delete(
    user: str = typer.Argument(..., help="The user name."),
    mechanism: Optional[str] = typer.Option(None, "--mechanism",
                                            help="Only this mechanism's credential (default: all)."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Delete a user's SCRAM credentials (one mechanism's, or all of them)."""
    from .client import Cluster

    deleted = delete_scram_credentials(Cluster(bootstrap, timeout), user, mechanism)
    output.note(f"user {user}: {', '.join(deleted)} deleted")
