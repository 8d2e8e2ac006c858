"""One error hierarchy: every exception class autotune defines derives from AutotuneError."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import autotune
from autotune.errors import AutotuneError


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(autotune.__path__, "autotune."):
        if info.name.endswith("__main__"):
            continue  # `python -m autotune`: it runs the command line
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == info.name:
                found[f"{info.name}.{name}"] = value
    return found


def test_every_exception_class_derives_from_autotune_error() -> None:
    classes = _exception_classes()
    # A warning is not an error: NoProfileWarning tells, it stops nothing.
    errors = {name: cls for name, cls in classes.items() if not issubclass(cls, Warning)}
    assert len(errors) >= 15, sorted(errors)  # the walk found them: a broken walk must not pass as "no stray class"
    strays = sorted(name for name, cls in errors.items() if not issubclass(cls, AutotuneError))
    assert strays == []


def test_the_command_line_ends_any_autotune_error_in_one_line() -> None:
    from click.testing import CliRunner

    from autotune.cli import main

    @main.command("fails-for-test")
    def fails() -> None:
        raise AutotuneError("the study file is gone; run the search again")

    try:
        result = CliRunner().invoke(main, ["fails-for-test"])
    finally:
        main.commands.pop("fails-for-test")
    assert (result.exit_code, result.output) == (2, "Error: the study file is gone; run the search again\n")
