"""One base class for every error autotune raises on purpose.

The command line catches ``AutotuneError`` once and prints it as an outcome
(one line, exit status 2), never as a traceback or a usage banner: what a user
can act on. Each subclass also keeps the builtin it used to be (``ValueError``,
``RuntimeError``, ``OSError``), so code that caught those still does.
"""

from __future__ import annotations


class AutotuneError(Exception):
    """An error autotune states as an outcome: what happened, with the value, and what to do next."""
