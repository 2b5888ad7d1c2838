"""Compact terminal tables (rich) that stay readable at 80 columns without cutting a number.

Layout: no outer border, one rule under the header, two spaces between columns (one with ``padding=0``). Numeric
and code-like columns never wrap (``no_wrap``): a value is printed whole, or visibly cut with "…" if nothing else
can give way; text columns wrap at spaces and fold inside long words. Headers may hold ``\\n`` to take two lines.
:func:`fit` plans the widths for the console (80 columns when the output is not a terminal).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

# what a terminal would act on or reorder: C0/C1 controls (tab and newline too: one cell, one line), separators and
# the bidirectional formatting characters
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` with every control or bidirectional-formatting character written as its Python escape (``\\x1b``,
    ``\\u202e``), so that text from a user's file prints as written and never acts on the terminal."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)

_STYLES = {"num": ("right", True), "key": ("left", True), "text": ("left", False)}  # justify, no_wrap


def compact_table(title: Any, columns: Sequence[tuple[str, str]], **kwargs: Any) -> Any:
    """A rich ``Table`` with one column per ``(header, style)``; ``style`` is ``"num"`` (right-aligned, no wrap),
    ``"key"`` (left-aligned, no wrap) or ``"text"`` (left-aligned, wraps and folds). ``kwargs`` override the
    ``Table`` options (e.g. ``padding=0`` for one space between columns)."""
    from rich import box
    from rich.table import Table

    options = dict(title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                   collapse_padding=True, padding=(0, 1), header_style="bold")
    table = Table(title=title, **{**options, **kwargs})
    for header, style in columns:
        justify, no_wrap = _STYLES[style]  # a cut no-wrap cell ends in "…", never silently
        table.add_column(header, justify=justify, no_wrap=no_wrap, overflow="ellipsis" if no_wrap else "fold")
    return table


def console(**kwargs: Any) -> Any:
    """A rich ``Console`` without the highlighter (quadratic in the length of a word) or markup emoji."""
    from rich.console import Console

    return Console(highlight=False, emoji=False, **kwargs)


def fit(table: Any, con: Any) -> Any:
    """``table`` with fixed widths for its wrapping columns so that it fits ``con.width``, or unchanged if it fits.

    The no-wrap columns keep their natural width (every value whole); the wrapping columns share what is left, each
    at least its longest word where possible (else folded), the rest in proportion to its natural width. (rich's own
    collapse can cut a no-wrap column while a wrapping one still has room.)"""
    options = con.options
    sizes = [table._measure_column(con, options, c) for c in table.columns]  # (min, max), padding included
    room = con.width - table._extra_width
    if sum(s.maximum for s in sizes) <= room:
        return table
    flex = [i for i, c in enumerate(table.columns) if not c.no_wrap and c.width is None]
    fixed = sum(s.maximum for i, s in enumerate(sizes) if i not in flex)
    left = room - fixed
    if not flex or left < len(flex):
        return table  # nothing can make it fit: let rich decide
    least = sum(sizes[i].minimum for i in flex)
    if left < least:  # even the longest words do not fit: fold them, each column its share
        width = {i: max(1, left * sizes[i].minimum // least) for i in flex}
        for i in flex:
            table.columns[i].width = max(width[i] - table._get_padding_width(i), 1)
        return table
    width = {i: sizes[i].minimum for i in flex}
    spare = left - sum(width.values())
    want = {i: sizes[i].maximum - sizes[i].minimum for i in flex}
    total = sum(want.values())
    for i in flex:
        width[i] += min(want[i], spare * want[i] // total) if total else 0
    for i in flex:
        pad = table._get_padding_width(i)
        table.columns[i].width = max(width[i] - pad, 1)
    return table
