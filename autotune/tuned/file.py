"""The tuned file, ``recipes/<name>.tuned.toml``: read, write, match.

Data, never code (its schema: ``autotune.tuned.schema``). One profile per hardware (GPU model, or ``cpu``); tuning on
other hardware adds a profile and keeps the others. Written atomically: a
reader sees the old file or the new one, never half of one. Reading validates
everything and lists every problem at once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import os
import shlex
import tempfile
from pathlib import Path
from typing import Any

import tomli_w

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from autotune.config import Config
from autotune.errors import AutotuneError
from autotune.tuned.schema import SCHEMA_VERSION, validate


class TunedFileError(AutotuneError, ValueError):
    """A tuned file that cannot be used; the message lists every problem."""


class TunedFileWriteError(TunedFileError, OSError):
    """The tuned file could not be written (a folder we may not write, a full disk); the old file stands."""


def read(path: Path, recipe: str | None = None) -> dict[str, Any]:
    """Parse and validate a tuned file; raises TunedFileError listing every problem.

    `recipe`: the recipe it is read for; a file whose ``recipe`` names another is an error naming both (a copied
    or renamed file holds what was measured on another workload). None where the file itself says whose it is
    (a ``.tuned.toml`` path given to show or export).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TunedFileError(f"cannot read tuned file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise TunedFileError(f"tuned file {path} is not UTF-8 text (a TOML file must be): byte {exc.start} is "
                             f"{exc.object[exc.start:exc.start + 1]!r}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TunedFileError(f"tuned file {path} is not valid TOML: {exc}") from exc
    problems = validate(data, str(path))
    if problems:
        raise TunedFileError(f"tuned file {path} has {len(problems)} problem(s):\n  - " + "\n  - ".join(problems))
    if recipe is not None and data.get("recipe", recipe) != recipe:
        raise TunedFileError(
            f"tuned file {path} is for recipe {data['recipe']!r}, but was read for recipe {recipe!r}: a tuned file "
            f"holds what was measured on its own recipe's workload. Tune this one with `autotune search --recipe "
            f"{shlex.quote(recipe)}`, or, if the file was only renamed, set recipe = {_toml_string(recipe)} in it."
        )
    return data


def _toml_string(text: str) -> str:
    return tomli_w.dumps({"k": text})[len("k = "):].strip()


def knobs_to_config(knobs: dict[str, Any]) -> Config:
    return Config.from_dict({k: v for k, v in knobs.items()})


def config_to_knobs(config: Config) -> dict[str, Any]:
    # TOML has no null: an unset prefetch_factor is simply absent.
    return {k: v for k, v in config.as_dict().items() if v is not None}


def shown_as(path: Path, recipe: str) -> str:
    """What `autotune show --recipe` takes to print the tuned file at `path`, run from the current folder.

    A recipe in ./recipes resolves by its name; any other (a workload given by path) is
    found by the tuned file's own path, since its name alone resolves to nothing. Quoted
    for a shell, as the profile's ``command`` is: the header's command runs as written.

    >>> shown_as(Path("recipes/mnist_cnn.tuned.toml"), "mnist_cnn")
    'mnist_cnn'
    >>> shown_as(Path("/nowhere/work/my_model.tuned.toml"), "my_model")
    '/nowhere/work/my_model.tuned.toml'
    >>> shown_as(Path("/nowhere/my work/model.tuned.toml"), "model")
    "'/nowhere/my work/model.tuned.toml'"
    """
    path = Path(path)
    absolute = path if path.is_absolute() else Path.cwd() / path
    if absolute == Path.cwd() / "recipes" / f"{recipe}.tuned.toml":
        return shlex.quote(recipe)
    try:
        return shlex.quote(str(absolute.relative_to(Path.cwd())))
    except ValueError:
        return shlex.quote(str(absolute))


def write_profile(path: Path, recipe: str, hardware: str, profile: dict[str, Any]) -> dict[str, Any]:
    """Add or replace one hardware's profile, keeping the others; atomic."""
    path = Path(path)
    data: dict[str, Any] = {"schema": SCHEMA_VERSION, "recipe": recipe, "profiles": {}}
    if path.exists():
        data = read(path, recipe)
    data["profiles"][hardware] = profile
    problems = validate(data)
    if problems:  # our own bug if it happens; never write a file we could not read back
        raise TunedFileError("refusing to write an invalid tuned file:\n  - " + "\n  - ".join(problems))
    header = (
        f"# autotune tuned file for {recipe!r}: data, not code. Commit it.\n"
        f"# Each profile says which command made it; `autotune show --recipe {shown_as(path, recipe)}` prints it.\n"
    )
    text = header + tomli_w.dumps(data)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMPORARY_SUFFIX, dir=path.parent)
    except OSError as exc:
        raise TunedFileWriteError(_unwritable(path, exc)) from exc
    try:
        # Held until the file is in place (its descriptor stays open until then: closing it would let the lock go):
        # a temporary whose lock can be taken belongs to a writer that died.
        fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(fd, "w", encoding="utf-8", closefd=False) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes 0600; a file meant to be committed and read by a team keeps the mode it had,
        # or gets the one the umask gives a new file.
        os.chmod(tmp, _mode_for(path))
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise TunedFileWriteError(_unwritable(path, exc)) from exc
        raise
    finally:
        os.close(fd)
    return data


TEMPORARY_SUFFIX = ".tmp"


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove the temporaries of `path` that a killed writer left (``.NAME.tuned.toml.*.tmp``); the ones removed.

    A writer holds a lock on its temporary until the file is in place, and a process's locks end with it, so a
    temporary whose lock can be taken is stale. Nothing else in the folder is touched.
    """
    removed: list[Path] = []
    for tmp in Path(path).parent.glob(f".{glob.escape(Path(path).name)}.*{TEMPORARY_SUFFIX}"):
        try:
            fd = os.open(tmp, os.O_RDONLY)
        except OSError:
            continue  # gone meanwhile, or not ours to read
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live writer holds it
        finally:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
            removed.append(tmp)
    return removed


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def check_writable(path: Path) -> None:
    """Fail before a search, not after it, when the tuned file's folder cannot take the file.

    Creates nothing: a search that fails later must not leave an empty ./recipes behind. A folder still to be
    made is checked through the nearest one that exists, where `write_profile` will make it. Its error says that
    nothing ran: there is no study yet to keep any trial.
    """
    path = Path(path)
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        if not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder))
        if folder != path.parent:
            if not os.access(folder, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(folder))
            return
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".check", dir=folder)
        os.close(fd)
        os.unlink(tmp)
        remove_stale_temporaries(path)
    except OSError as exc:
        raise TunedFileWriteError(_unwritable(path, exc, before=True)) from exc


def _unwritable(path: Path, exc: OSError, before: bool = False) -> str:
    """Why the tuned file at `path` cannot be written, and what then stands: nothing (`before` a search), or the
    study's trials and its measured end, which the same command writes without measuring again."""
    fix = f"make {path.parent} writable" if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else "fix that"
    said = f"cannot write tuned file {path}: {exc.strerror or exc} ({exc.filename or path.parent})"
    if before:
        return (f"{said}; a search must be able to write its tuned file before it starts, so nothing was run: "
                f"{fix} and run the same command again.")
    return f"{said}; the study keeps its trials: {fix} and run the same command again."


def match(data: dict[str, Any], hardware: str) -> dict[str, Any] | None:
    """The profile for this hardware, if the file has one."""
    return data.get("profiles", {}).get(hardware)
