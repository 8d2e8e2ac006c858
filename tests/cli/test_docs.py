"""docs/command-line.md shows each command's help as the program prints it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main

PAGE = Path(__file__).parents[2] / "docs" / "command-line.md"


def _help_blocks() -> dict[str, str]:
    """Each fenced block of the page that is a help text, by its command ("" for the program's own)."""
    blocks = re.findall(r"^```\n(Usage: autotune.*?)```$", PAGE.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {re.match(r"Usage: autotune ?(\w*)", block).group(1): block for block in blocks}


def _help(*command: str) -> str:
    # An 80-column terminal, whatever the one running the tests: click wraps its help 2 columns short of it.
    result = CliRunner().invoke(main, [*command, "--help"], prog_name="autotune", terminal_width=78)
    assert result.exit_code == 0, result.output
    return result.output


def test_the_page_shows_every_command_and_the_programs_own_help() -> None:
    blocks = _help_blocks()
    assert sorted(blocks) == sorted(["", *main.commands]), "a help block per command, and the program's own"
    assert blocks[""] == _help()
    words = {2: "Two", 3: "Three", 4: "Four", 5: "Five", 6: "Six", 7: "Seven"}
    opening = PAGE.read_text(encoding="utf-8").split("\n\n", 2)[1]
    assert opening.startswith(f"{words[len(main.commands)]} commands: "), opening
    named = set(re.findall(r"`autotune\s+(\w+)`", opening))
    assert named == set(main.commands), opening


@pytest.mark.parametrize("command", sorted(main.commands))
def test_the_page_shows_each_commands_help_as_printed(command: str) -> None:
    assert _help_blocks().get(command) == _help(command)
