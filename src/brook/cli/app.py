"""The root `brook` command: its subcommands, `--version`, `--debug`, `--timeout`, `-b`, and how
errors reach the user: one line on stderr, `brook: <what went wrong>`, and a non-zero exit code
(1 when an operation failed, 2 for invalid arguments); a traceback only with `--debug`.

confluent-kafka and rich are imported inside the commands that use them, so that `brook broker`
(started for every integration test) does not pay for them.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any, Optional

import typer
from typer.core import TyperGroup

from .. import __version__
from . import acls, cluster, configs, console, dump_log, groups, offsets, options, topics, users
from . import quotas, transactions
from ..console.command import console as web_console
from .broker import broker
from .errors import CliError


class BrookGroup(TyperGroup):
    """Runs a command and turns whatever escapes it into one line on stderr and an exit code."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        options.reset()
        _flags_without_metavar(self)
        args, command_config = options.take_command_config(list(sys.argv[1:] if args is None else args))
        if command_config is not None:  # given to the root, wherever it stood
            args = ["--command-config", command_config, *args]
        try:
            rv = super().main(args=args, prog_name=prog_name or "brook",
                              complete_var=complete_var, standalone_mode=False, **extra)
        except CliError as exc:
            _fail(exc.message, exc.code, exc)
        except KeyboardInterrupt:
            sys.exit(130)
        except Exception as exc:  # noqa: BLE001 - every error is an answer, never a crash
            _fail(*_describe(exc), exc)
        sys.exit(rv if isinstance(rv, int) else 0)


def _flags_without_metavar(command: Any) -> None:
    """Flags (and --help) take no value, so their help shows none (typer would show `<bool>`)."""
    help_option = command.get_help_option(typer.Context(command))
    for param in [*command.params, help_option]:
        if getattr(param, "is_flag", False):
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _flags_without_metavar(sub)


def _describe(exc: Exception) -> tuple[str, int]:
    """Message and exit code of an exception that is not a CliError."""
    if type(exc).__name__ == "NoArgsIsHelpError":  # click's way of showing help for no args
        text = exc.format_message()  # type: ignore[attr-defined]  # empty: rich printed it
        if text:
            sys.stderr.write(text + "\n")
        sys.exit(getattr(exc, "exit_code", 2))
    if type(exc).__name__ == "Abort":
        return "aborted", 1
    format_message = getattr(exc, "format_message", None)
    exit_code = getattr(exc, "exit_code", None)
    if callable(format_message) and isinstance(exit_code, int):  # click's usage errors
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        return f"{format_message()}{hint}", exit_code
    kafka_error = _kafka_error_text(exc)
    if kafka_error:
        return kafka_error, 1
    if isinstance(exc, OSError):
        return str(exc), 1
    return f"unexpected error: {type(exc).__name__}: {exc} (--debug shows the traceback)", 1


def _kafka_error_text(exc: Exception) -> str | None:
    if type(exc).__module__.startswith("cimpl") or type(exc).__name__ == "KafkaException":
        err = exc.args[0] if exc.args else None
        if hasattr(err, "str") and hasattr(err, "name"):
            return f"{err.str()} ({err.name()})"
        return str(exc)
    return None


def _fail(message: str, code: int, exc: BaseException) -> None:
    if options.current.debug:
        traceback.print_exception(exc)
    sys.stderr.write(f"brook: {message}\n")
    sys.stderr.flush()
    sys.exit(code)


# Markdown: help texts' single line breaks join, and [brackets] are shown, not read as markup.
app = typer.Typer(cls=BrookGroup, add_completion=False, no_args_is_help=True,
                  rich_markup_mode="markdown", pretty_exceptions_enable=False,
                  help="brook: a Kafka-protocol-compatible message log broker, and its tools.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"brook {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Tracebacks and client logs on errors."),
    timeout: float = typer.Option(options.DEFAULT_TIMEOUT, "--timeout", min=0.1,
                                  help="Seconds to wait for a broker's answer (also after the "
                                       "command)."),
    bootstrap: Optional[str] = typer.Option(
        None, "--bootstrap-server", "-b", show_default=False,
        help="host:port of a broker (also after the command, where it wins)."),
    command_config: Optional[str] = typer.Option(
        None, "--command-config", show_default=False,
        help="A client.properties file: security.protocol, sasl.*, ssl.* in Kafka's or "
             f"librdkafka's names (also after the command). [default: ${options.COMMAND_CONFIG_ENV}]"),
) -> None:
    options.reset(debug=debug, timeout=timeout, bootstrap=bootstrap, command_config=command_config)


app.command()(broker)
app.command("cluster")(cluster.cluster)
app.add_typer(topics.app, name="topics")
app.add_typer(groups.app, name="groups")
app.add_typer(offsets.app, name="offsets")
app.add_typer(configs.app, name="configs")
app.add_typer(users.app, name="users")
app.add_typer(acls.app, name="acls")
app.add_typer(quotas.app, name="quotas")
app.add_typer(transactions.app, name="transactions")
app.command("produce")(console.produce)
app.command("consume")(console.consume)
app.command("dump-log")(dump_log.dump_log)
app.command("console")(web_console)


def main() -> None:
    # kio gives its types hypothesis strategies whenever hypothesis can be imported (and
    # hypothesis imports trio and pytest where they are installed): a second or more of every
    # command, the broker's start among them, in a development environment, for strategies no
    # command uses. The command runs without them.
    sys.modules.setdefault("hypothesis", None)
    app(prog_name="brook")
