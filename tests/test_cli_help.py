"""Every option and argument of every `cudal2` command says what it is in --help."""

import typer.main

from cudal2.cli import app


def _commands(command, path=()):
    """(path, command) of each leaf command under a click group (duck-typed: typer may carry its own click)."""
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield path, command
        return
    for name, sub in subcommands.items():
        yield from _commands(sub, (*path, name))


def test_every_cli_option_and_argument_has_a_help_text():
    leaves = list(_commands(typer.main.get_command(app)))
    assert len(leaves) >= 10, "the walk found too few commands: it no longer reaches them"
    missing = [f"cudal2 {' '.join(path)} {param.name}" for path, command in leaves for param in command.params
               if not (getattr(param, "help", None) or "").strip()]
    assert not missing, f"options and arguments without a help text: {missing}"
