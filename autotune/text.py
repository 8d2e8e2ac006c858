"""Plain-text tables and number formats for what the commands print."""

from __future__ import annotations

from collections.abc import Sequence


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = (), indent: str = "  "
) -> list[str]:
    """Aligned columns under a header and a rule; columns in `right` are right-aligned (numbers).

    >>> table(["knob", "value"], [["batch_size", "128"]], right=[1])
    ['  knob        value', '  ----------  -----', '  batch_size    128']
    """
    widths = [
        max(len(headers[i]), *(len(r[i]) for r in rows)) if rows else len(headers[i]) for i in range(len(headers))
    ]

    def line(cells: Sequence[str]) -> str:
        out = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return (indent + "  ".join(out)).rstrip()

    return [line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows]


def rate(samples_per_s: float | None) -> str:
    """Samples per second with thousands separators: 14,210."""
    return "-" if samples_per_s is None else f"{samples_per_s:,.0f}"


def short_rate(samples_per_s: float) -> str:
    """A rate that fits a heat-map cell: 950, 14.2k, 1.3M."""
    if samples_per_s >= 1e6:
        return f"{samples_per_s / 1e6:.1f}M"
    if samples_per_s >= 1e4:
        return f"{samples_per_s / 1e3:.0f}k"
    if samples_per_s >= 1e3:
        return f"{samples_per_s / 1e3:.1f}k"
    return f"{samples_per_s:.0f}"


def percent(share: float | None, digits: int = 0) -> str:
    return "-" if share is None else f"{share:.{digits}%}"


def mib(n_bytes: float | None) -> str:
    return "-" if n_bytes is None else f"{n_bytes / 2**20:,.0f} MiB"


def bar(share: float, width: int = 20) -> str:
    """A bar of block characters, `share` of `width` long (eighths resolve the last cell)."""
    eighths = round(max(0.0, min(1.0, share)) * width * 8)
    full, part = divmod(eighths, 8)
    return "█" * full + ("▏▎▍▌▋▊▉"[part - 1] if part else "")


def elapsed(seconds: float) -> str:
    """Minutes and seconds: 1:24."""
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def nonfinite(value: float) -> str:
    """A loss that is no number, as the messages name it.

    >>> nonfinite(float("nan")), nonfinite(float("-inf"))
    ('NaN', '-inf')
    """
    return "NaN" if value != value else str(value)


def printable(text: str) -> str:
    """`text` with control characters escaped, line breaks kept: what a file or a workload says cannot clear a
    terminal, set its title or colour it.

    >>> printable("a\\x1b[2Jb\\tc\\nd\\x07")
    'a\\\\x1b[2Jb\\\\tc\\nd\\\\x07'
    """
    return "".join(c if c == "\n" or c.isprintable() else repr(c)[1:-1] for c in text)
