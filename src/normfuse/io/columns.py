"""Terminal text that fits in 100 columns: aligned tables, wrapped lines, short names.

Every command's default output keeps within `WIDTH` columns: long lines wrap onto indented
continuation lines (words are never split, so a name longer than a line stays whole), a table
row too wide for a line continues on the next, and long op names print abbreviated. `--wide`
asks for the full-width form, where nothing wraps.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path

WIDTH = 100
GAP = "  "
# Op names abbreviated in narrow tables, longest first so a legend reads in a stable order.
OP_ABBREVIATIONS = {
    "SkipSimplifiedLayerNormalization": "SkipSLN",
    "SimplifiedLayerNormalization": "SLN",
    "SkipLayerNormalization": "SkipLN",
    "LayerNormalization": "LN",
    "RMSNormalization": "RMSN",
    "GroupNormalization": "GN",
}


def wrap(text: str, wide: bool = False, indent: str = "    ") -> str:
    """`text` with each of its lines wrapped at `WIDTH` columns, continuations indented by
    `indent`; unchanged when `wide`."""
    if wide:
        return text
    return "\n".join(
        textwrap.fill(
            line,
            WIDTH,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        for line in text.split("\n")
    )


def aligned(rows: list[list[str]], right: set[int] | None = None, wide: bool = False) -> list[str]:
    """`rows` of cells as text, one entry per row, each column padded to its widest cell (those
    in `right` right-aligned), `GAP` apart. Unless `wide`, a row longer than `WIDTH` continues on
    an indented next line (in the same entry) from the first cell that does not fit."""
    right = right or set()
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(width) if index in right else cell.ljust(width)
            for index, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append(GAP.join(cells).rstrip() if wide else _flowed(cells))
    return lines


def _flowed(cells: list[str], indent: str = "    ") -> str:
    """Padded cells joined `GAP` apart into lines of at most `WIDTH` columns: a cell that does
    not fit starts an indented next line (and wraps there if it is itself too long)."""
    lines, current = [], cells[0]
    for cell in cells[1:]:
        joined = f"{current}{GAP}{cell}"
        if len(joined.rstrip()) > WIDTH:
            lines.append(current.rstrip())
            joined = indent + cell.strip()
        current = joined
    lines.append(current.rstrip())
    return "\n".join(wrap(line, indent=indent) for line in lines)


def short_op(op: str, wide: bool = False) -> str:
    """An op's abbreviation in a narrow table (`SLN`); the op itself when `wide` or when it has
    none."""
    return op if wide else OP_ABBREVIATIONS.get(op, op)


def op_legend(ops: list[str]) -> str:
    """`SLN SimplifiedLayerNormalization, LN LayerNormalization` for the abbreviated `ops`
    among them; empty when none is."""
    shown = [op for op in OP_ABBREVIATIONS if op in set(ops)]
    return ", ".join(f"{OP_ABBREVIATIONS[op]} {op}" for op in shown)


def middle(text: str, width: int) -> str:
    """`text` cut to `width` characters by replacing its middle with `~` (both ends kept)."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep - keep // 2] + "~" + text[len(text) - keep // 2 :]


def keyed_names(names: list[str], room: int) -> tuple[list[str], list[str]]:
    """`names` as table cells within `room` columns: the names themselves when they fit, else
    keys (`#1`, `#2`, ... per distinct name) and the legend lines that give each key's name."""
    if max((len(name) for name in names), default=0) <= room:
        return names, []
    keys = {name: f"#{number}" for number, name in enumerate(dict.fromkeys(names), 1)}
    return [keys[name] for name in names], [f"  {key}  {name}" for name, key in keys.items()]


def display_names(names: list[str], runs: list | None = None) -> tuple[list[str], str]:
    """Names that tell the models apart: the folder they all share is dropped (and returned), and
    a name given more than once within one run (`runs`: a key per name) is numbered (`m.onnx`,
    `m.onnx (2)`)."""
    paths = [Path(name) for name in names]
    folder = ""
    parents = {str(path.parent) for path in paths}
    if len(parents) == 1 and parents != {"."} and all(path.suffix == ".onnx" for path in paths):
        folder = parents.pop()
        names = [path.name for path in paths]
    seen: Counter[tuple] = Counter()
    shown = []
    for name, run_key in zip(names, runs or [0] * len(names), strict=True):
        seen[(run_key, name)] += 1
        count = seen[(run_key, name)]
        shown.append(name if count == 1 else f"{name} ({count})")
    return shown, folder
