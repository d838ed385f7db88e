"""The command line as a table of commands: each command's options and handler, the
declared --out-* files, main's exit codes."""

import argparse

import pytest

from repens import cli


def _subparsers(parser):
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_every_command_of_the_table_is_a_subcommand_with_its_handler():
    parsers = _subparsers(cli._parser())
    assert list(parsers) == [c.name for c in cli.COMMANDS]
    for command in cli.COMMANDS:
        assert parsers[command.name].get_default("func") is command.run


def test_the_commands_the_workflow_calls_are_there():
    names = {c.name for c in cli.COMMANDS}
    assert {
        "train",
        "train-stack",
        "hmc",
        "prepare-images",
        "image-table",
        "synthetic-table",
        "synthetic-figure",
        "toy-figure",
        "toy-table",
        "training-curves",
        "uci-download",
        "uci-table",
        "claims",
        "claim-figures",
        "claims-page",
        "reference",
        "budget",
        "where",
        "export-jobs",
        "run-jobs",
        "pack",
        "lease",
        "import-results",
        "restore-result",
    } == names


def test_outputs_declare_required_and_optional_files_in_order():
    p = argparse.ArgumentParser()
    cli._outputs(p, "csv", ("html", "as HTML"), "tex")
    flags = [(a.option_strings[0], a.required, a.help) for a in p._actions if a.option_strings[0].startswith("--out")]
    assert flags == [("--out-csv", True, None), ("--out-html", False, "as HTML"), ("--out-tex", True, None)]
    args = p.parse_args(["--out-csv", "a.csv", "--out-tex", "a.tex"])
    assert (args.out_csv, args.out_html, args.out_tex) == ("a.csv", None, "a.tex")


@pytest.mark.parametrize(
    "command,required,optional",
    [
        (
            "uci-table",
            ["--out-tex", "--out-csv", "--out-seeds"],
            ["--out-html", "--out-seeds-html", "--out-vs-de", "--out-vs-de-html", "--out-md", "--out-seeds-md"],
        ),
        (
            "image-table",
            ["--out-tex", "--out-png", "--out-csv", "--out-vs-paper"],
            ["--out-html", "--out-vs-paper-html"],
        ),
        ("claims", ["--out-csv", "--out-md"], ["--out-html"]),
        ("toy-figure", ["--out-png", "--out-pdf"], []),
    ],
)
def test_table_commands_have_their_output_flags(command, required, optional):
    p = _subparsers(cli._parser())[command]
    outs = {
        a.option_strings[0]: a.required
        for a in p._actions
        if a.option_strings and a.option_strings[0].startswith("--out-")
    }
    assert outs == {**{f: True for f in required}, **{f: False for f in optional}}


def test_a_missing_required_option_exits_2(capsys):
    with pytest.raises(SystemExit) as err:
        cli.main(["toy-table", "--out-csv", "x.csv"])
    assert err.value.code == 2
    assert "the following arguments are required: --out-tex" in capsys.readouterr().err


def test_main_returns_the_handlers_exit_code(monkeypatch):
    monkeypatch.setattr(cli, "_where", lambda args: 17)
    commands = tuple(
        cli.Command(c.name, c.help, c.setup, cli._where if c.name == "where" else c.run) for c in cli.COMMANDS
    )
    monkeypatch.setattr(cli, "COMMANDS", commands)
    assert cli.main(["where", "some.json"]) == 17
