"""Megatron-LM's ``--pipeline-model-parallel-layout``: its ``E``/``t``/``m``/``L`` grammar both ways.

The string lists the layers of every (virtual) pipeline stage, stages split
by ``|``: ``E`` the embedding, ``t`` a transformer decoder layer, ``m`` a
multi-token-prediction (MTP) layer, ``L`` the loss. ``x*n`` repeats one
character, ``(...)*n`` a parenthesised group (one level of parentheses),
commas are cosmetic. The stages are listed chunk-major: stage ``i = c * p +
s`` is chunk (virtual stage) ``c`` of pipeline rank ``s``, which is
sappkit's model order for 1F1B and interleaved schedules. Megatron then
requires the embedding first and the loss last, each exactly once, as many
``t`` as ``--num-layers``, the MTP layers after every decoder layer, all in
one rank's last chunk and not on the first rank.

Source followed: Megatron-LM ``megatron/core/transformer/
pipeline_parallel_layer_layout.py`` (``parse_str_to_list`` and
``validate_layer_layout``) and the ``--pipeline-model-parallel-layout`` help
in ``megatron/training/arguments.py``, commit ``d98e8a64ddf3`` (2026-08-22).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._check import short
from ..errors import InputError
from ..limits import MAX_EXPANDED_CHARS

__all__ = ["Layout", "parse_layout", "format_layout", "LAYER_CHARS"]

#: The layer characters Megatron's layout knows, and what each names.
LAYER_CHARS = {"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}
#: Longest layout string accepted (a 1,024-stage layout with run-length groups is far shorter).
_MAX_TEXT = 100_000


@dataclass(frozen=True)
class Layout:
    """A parsed layout: every (virtual) stage's layer characters, in Megatron's chunk-major order.

    Attributes
    ----------
    stages : tuple of str
        Stage ``i = chunk * p + rank`` as a string of ``E``, ``t``, ``m``, ``L``.
    """

    stages: tuple[str, ...]

    def cells(self, pipeline_parallel: int) -> list[list[str]]:
        """``[chunk][rank]`` layer strings for ``p = pipeline_parallel`` ranks (the count must divide)."""
        p = pipeline_parallel
        if p < 1 or len(self.stages) % p:
            raise InputError(f"--pipeline-model-parallel-layout lists {len(self.stages)} stages, which "
                             f"--pipeline-model-parallel-size {p} does not divide (Megatron needs a multiple)")
        return [list(self.stages[c * p:(c + 1) * p]) for c in range(len(self.stages) // p)]

    def decoder_counts(self, pipeline_parallel: int) -> list[list[int]]:
        """``[chunk][rank]``: decoder layers (``t``) per cell."""
        return [[cell.count("t") for cell in row] for row in self.cells(pipeline_parallel)]

    def problems(self, pipeline_parallel: int, num_layers: int, mtp_layers: int = 0) -> list[str]:
        """What Megatron's layout validation refuses, in its order (empty when it accepts the layout)."""
        rows = self.cells(pipeline_parallel)
        flat = "".join(self.stages)
        found = []
        if not flat.startswith("E") or flat.count("E") != 1:
            found.append("the embedding (E) must come first and exactly once")
        if not flat.endswith("L") or flat.count("L") != 1:
            found.append("the loss (L) must come last and exactly once")
        if flat.count("t") != num_layers:
            found.append(f"it holds {flat.count('t')} decoder layers (t) but --num-layers is {num_layers}")
        if flat.count("m") != mtp_layers:
            found.append(f"it holds {flat.count('m')} MTP layers (m) but --mtp-num-layers is {mtp_layers}")
        if "m" in flat and "t" in flat[flat.index("m"):]:
            found.append("decoder layers must all come before the MTP layers")
        if any("m" in row[s] for row in rows[:-1] for s in range(pipeline_parallel)):
            found.append("MTP layers must sit in a rank's last chunk")
        mtp_ranks = [s for s in range(pipeline_parallel) if "m" in rows[-1][s]]
        if flat.count("m") == mtp_layers and len(mtp_ranks) > 1:
            found.append("all MTP layers must sit in one chunk")
        if len(rows) > 1 and any("m" in rows[c][0] for c in range(len(rows) - 1)):
            found.append("MTP layers must not sit on the first rank")
        return found


def parse_layout(text: str) -> Layout:
    """Parse a ``--pipeline-model-parallel-layout`` string the way Megatron-LM does.

    Commas are dropped; then every ``(group)*n`` is unrolled (one level of
    parentheses: the group holds no parenthesis), then every ``x*n``; then
    the text splits into stages at ``|``, and each character must be one of
    ``E``, ``t``, ``m``, ``L``.

    Examples
    --------
    >>> layout = parse_layout("Ettt|(tt|)*2,m|L")
    >>> layout.stages
    ('Ettt', 'tt', 'tt', 'm', 'L')
    >>> parse_layout("E|t*3|tL").decoder_counts(3)
    [[0, 3, 1]]
    """
    if not isinstance(text, str):
        raise InputError(f"pipeline layout must be a string; got {short(text)}")
    if len(text) > _MAX_TEXT:
        raise InputError(f"pipeline layout holds {len(text):,} characters; the limit is {_MAX_TEXT:,}")
    expanded = _unroll_repeats(_unroll_groups(text.replace(",", "")))
    for stage in expanded.split("|"):
        for char in stage:
            if char not in LAYER_CHARS:
                raise InputError(f"pipeline layout {short(text)}: {char!r} is not a layer character (Megatron "
                                 f"knows {', '.join(f'{c} ({name})' for c, name in LAYER_CHARS.items())})")
    return Layout(tuple(expanded.split("|")))


def _unroll_groups(text: str) -> str:
    """Replace every ``(group)*n`` by ``n`` copies of ``group`` (the group holds no ``)`` ), left to right."""
    out, size, i = [], _Size(text), 0
    while i < len(text):
        close = text.find(")", i + 1) if text[i] == "(" else -1
        count, end = _count_after(text, close + 1) if close > i + 1 else (None, i)
        if count is None:
            out.append(size.add(text[i]))
            i += 1
            continue
        group = text[i + 1:close]
        # what the group's own x*n repeats will expand to, so the total is bounded before anything is built
        out.append(size.add(group, count, weight=len(_unroll_repeats(group, _Size(text)))))
        i = end
    return "".join(out)


def _unroll_repeats(text: str, size: _Size | None = None) -> str:
    """Replace every ``x*n`` (one character ``x``) by ``n`` copies of ``x``, left to right."""
    out, size, i = [], size or _Size(text), 0
    while i < len(text):
        count, end = _count_after(text, i + 1) if i + 1 < len(text) else (None, i)
        if count is None:
            out.append(size.add(text[i]))
            i += 1
        else:
            out.append(size.add(text[i], count))
            i = end
    return "".join(out)


class _Size:
    """The running size of an expansion: each piece is counted before it is built, the total bounded."""

    def __init__(self, text: str):
        self.text, self.total = text, 0

    def add(self, piece: str, count: int = 1, *, weight: int | None = None) -> str:
        self.total += (len(piece) if weight is None else weight) * count
        if self.total > MAX_EXPANDED_CHARS:
            raise InputError(f"pipeline layout {short(self.text)} expands to more than "
                             f"{MAX_EXPANDED_CHARS.cited} layer characters")
        return piece * count


def _count_after(text: str, star: int) -> tuple[int | None, int]:
    """``(n, end)`` when ``text[star:]`` starts with ``*`` and digits, else ``(None, star)``."""
    if star >= len(text) or text[star] != "*":
        return None, star
    end = star + 1
    while end < len(text) and text[end] in "0123456789":
        end += 1
    if end - star - 1 > 7:  # more than MAX_EXPANDED_CHARS copies of anything
        raise InputError(f"pipeline layout {short(text)}: the repeat count {short(text[star + 1:end])} exceeds "
                         f"{MAX_EXPANDED_CHARS.cited}")
    return (int(text[star + 1:end]), end) if end > star + 1 else (None, star)


def format_layout(stages) -> str:
    """Write stage strings (chunk-major) as a compact layout string that :func:`parse_layout` reads back.

    Runs of three or more equal characters become ``x*n``; runs of equal
    stages become a ``(stage|)*n`` group, groups and single stages joined by
    cosmetic commas.

    Examples
    --------
    >>> format_layout(["Etttt", "ttttt", "ttttt", "ttttt", "tttL"])
    'Et*4|(t*5|)*3,t*3L'
    >>> parse_layout(format_layout(["E", "tt", "tt", "ttL"])).stages
    ('E', 'tt', 'tt', 'ttL')
    """
    stages = [str(stage) for stage in stages]
    pieces, i = [], 0
    while i < len(stages):
        run = 1
        while i + run < len(stages) and stages[i + run] == stages[i]:
            run += 1
        last = i + run == len(stages)
        grouped = run - 1 if last else run  # the final stage takes no trailing "|"
        if grouped >= 2:  # something always follows a group: more stages, or the final one
            pieces.append(f"({_compress(stages[i])}|)*{grouped},")
        else:
            pieces.extend(f"{_compress(stages[i])}|" for _ in range(grouped))
        if last:
            pieces.append(_compress(stages[i]))
        i += run
    return "".join(pieces)


def _compress(stage: str) -> str:
    """Runs of three or more equal characters as ``x*n``."""
    out, i = [], 0
    while i < len(stage):
        run = 1
        while i + run < len(stage) and stage[i + run] == stage[i]:
            run += 1
        out.append(f"{stage[i]}*{run}" if run >= 3 else stage[i] * run)
        i += run
    return "".join(out)
