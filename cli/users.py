"""`silt users`: add, delete and list the SCRAM users SASL clients log in as (PLAIN and
SCRAM-SHA-256/512 check against them), straight in the metadata store: agents read a
credential at each login, so a change applies to the next login on every agent. Only the
salt, iterations, stored key and server key are kept (never the password). The password is
read from a file (--password-file) or standard input, never from a flag (a flag is visible
in the process list and the shell history).

Trust boundary: these commands need the metadata database itself (its URL and credentials),
not a Kafka principal; whoever can write that database can add any user.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from agent.sasl.scram import DEFAULT_ITERATIONS, MECHANISMS, make_credential

from .context import Context, one_line_errors, pass_ctx
from .errors import CommandFailed
from .output import Output, columns, json_option

NAMES = list(MECHANISMS)


def _password(path: Path | None) -> str:
    """The password: the file's first line, else standard input's (a prompt on a tty)."""
    if path is not None:
        text = path.read_text()
    elif sys.stdin.isatty():
        text = click.prompt("password", hide_input=True, confirmation_prompt=True)
    else:
        text = sys.stdin.read()
    password = text.splitlines()[0] if text.splitlines() else ""
    if not password:
        raise CommandFailed("the password is empty")
    return password


@click.group()
def users() -> None:
    """Add, delete and list SCRAM users (the metadata database is the trust boundary)."""


@users.command("add")
@click.argument("name")
@click.option("--mechanism", "mechanisms", multiple=True,
              type=click.Choice(NAMES, case_sensitive=False),
              help="SCRAM mechanism (repeatable; default: both).")
@click.option("--iterations", default=DEFAULT_ITERATIONS, show_default=True,
              type=click.IntRange(4096, 16384), help="PBKDF2 iterations.")
@click.option("--password-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Read the password from this file's first line (default: stdin).")
@json_option()
@pass_ctx
@one_line_errors
def users_add(ctx: Context, name: str, mechanisms: tuple[str, ...], iterations: int,
              password_file: Path | None, out: Output) -> None:
    """Add NAME, or set its password (each mechanism's credential is replaced)."""
    if not name:
        raise CommandFailed("the user name is empty")
    password = _password(password_file)
    chosen = [m.upper() for m in mechanisms] or NAMES
    creds = [(name, make_credential(m, password, iterations)) for m in chosen]
    ctx.open(create=True)
    ctx.metadata.alter_scram_credentials([], creds)
    out.result({"user": name, "mechanisms": chosen, "iterations": iterations},
               lambda r: [f"user {name}: {', '.join(chosen)} ({iterations} iterations)"])


@users.command("delete")
@click.argument("name")
@click.option("--mechanism", "mechanisms", multiple=True,
              type=click.Choice(NAMES, case_sensitive=False),
              help="SCRAM mechanism (repeatable; default: every one the user has).")
@json_option()
@pass_ctx
@one_line_errors
def users_delete(ctx: Context, name: str, mechanisms: tuple[str, ...], out: Output) -> None:
    """Delete NAME's credentials (all, or those of the mechanisms given)."""
    have = [c.mechanism for c in ctx.metadata.scram_credentials(name)]
    chosen = [m.upper() for m in mechanisms] or have
    if not have or not set(chosen) <= set(have):
        raise CommandFailed(f"user {name} has no credential"
                            f" {', '.join(sorted(set(chosen) - set(have))) or ''}".rstrip())
    if ctx.metadata.alter_scram_credentials([(name, m) for m in chosen], []):
        raise CommandFailed(f"user {name}: deleted meanwhile")
    out.result({"user": name, "deleted": chosen},
               lambda r: [f"user {name}: deleted {', '.join(chosen)}"])


@users.command("list")
@json_option()
@pass_ctx
@one_line_errors
def users_list(ctx: Context, out: Output) -> None:
    """Every user and its mechanisms and iterations (never a secret)."""
    rows: list[dict[str, Any]] = [
        {"user": user, "mechanisms": [{"mechanism": m, "iterations": i} for m, i in creds]}
        for user, creds in ctx.metadata.scram_users().items()]
    out.result(rows, lambda rs: columns(
        [["user", "mechanisms"]] + [[r["user"], ", ".join(
            f"{m['mechanism']} ({m['iterations']})" for m in r["mechanisms"])] for r in rs],
        indent=""))
