"""Where a warning of the tuned API points: the user's line that called it, however deep inside autotune it is raised.

``load_tuned`` warns when called by the user and when called by ``tuned_loader`` or
``tuned_step``: a fixed ``stacklevel`` is right for one of them and one frame off for
the other.
"""

from __future__ import annotations

import sys
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # autotune/


def stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` in the caller that names the first frame outside autotune.

    >>> stacklevel()  # called from outside the package: the caller's own line
    1
    """
    frame = sys._getframe(1)  # the function that warns
    level = 1
    while frame is not None and Path(frame.f_code.co_filename).resolve().is_relative_to(_PACKAGE):
        frame = frame.f_back
        level += 1
    return level
