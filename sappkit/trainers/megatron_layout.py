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

import re
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

    Commas are dropped; then every ``(group)*n`` is unrolled (Megatron's
    ``\\(([^)]+)\\)\\*(\\d+)``, left to right: a group is everything up to the
    next ``)``, copied as written), then every ``x*n`` of the result (``(.)\\*(\\d+)``:
    any one character, ``|`` included); then the text splits into stages at
    ``|``, and each character must be one of ``E``, ``t``, ``m``, ``L``. The
    work is bounded: each pass measures what it would build before building
    it, and neither may exceed :data:`~sappkit.limits.MAX_EXPANDED_CHARS`
    characters (a group that unrolls to nothing, ``(t*0)*9999999``, is measured
    as the copies it makes, as Megatron makes them).

    Examples
    --------
    >>> layout = parse_layout("Ettt|(tt|)*2,m|L")
    >>> layout.stages
    ('Ettt', 'tt', 'tt', 'm', 'L')
    >>> parse_layout("E|t*3|tL").decoder_counts(3)
    [[0, 3, 1]]
    >>> parse_layout("E|*2t*002L").stages  # a repeated '|' is stages, a count may have leading zeros
    ('E', '', 'ttL')
    """
    if not isinstance(text, str):
        raise InputError(f"pipeline layout must be a string; got {short(text)}")
    if len(text) > _MAX_TEXT:
        raise InputError(f"pipeline layout holds {len(text):,} characters; the limit is {_MAX_TEXT:,}")
    grouped = _built(text, _group_pieces(text, text.replace(",", "")))
    expanded = _built(text, _repeat_pieces(text, grouped))
    for stage in expanded.split("|"):
        for char in stage:
            if char not in LAYER_CHARS:
                raise InputError(f"pipeline layout {short(text)}: {char!r} is not a layer character (Megatron "
                                 f"knows {', '.join(f'{c} ({name})' for c, name in LAYER_CHARS.items())})")
    return Layout(tuple(expanded.split("|")))


#: Megatron's second pattern: one character repeated.
_REPEAT = re.compile(r"(.)\*(\d+)")
_DIGITS = re.compile(r"\d+")


def _group_pieces(text: str, plain: str) -> list[tuple[str, int]]:
    """``plain`` as ``(piece, copies)`` after Megatron's first pattern: each ``(group)*n``, ``group`` holding no
    ``)`` and at least one character, is ``n`` copies of ``group``; the rest is one copy. Linear in ``plain``."""
    pieces, start, close = [], 0, -1
    i = plain.find("(")
    while i != -1:
        if close <= i:
            close = plain.find(")", i + 1)
            if close == -1:
                break
        digits = _DIGITS.match(plain, close + 2) if plain.startswith("*", close + 1) else None
        if close > i + 1 and digits:
            pieces += [(plain[start:i], 1), (plain[i + 1:close], _copies(text, digits.group()))]
            start = digits.end()
        i = plain.find("(", start if start > i else i + 1)
    return pieces + [(plain[start:], 1)]


def _repeat_pieces(text: str, grouped: str) -> list[tuple[str, int]]:
    """``grouped`` as ``(piece, copies)`` after Megatron's second pattern (``x*n``: ``n`` copies of ``x``)."""
    pieces, start = [], 0
    for match in _REPEAT.finditer(grouped):
        pieces += [(grouped[start:match.start()], 1), (match.group(1), _copies(text, match.group(2)))]
        start = match.end()
    return pieces + [(grouped[start:], 1)]


def _built(text: str, pieces: list[tuple[str, int]]) -> str:
    """The pieces joined, once their total is known to be within :data:`~sappkit.limits.MAX_EXPANDED_CHARS`."""
    if sum(len(piece) * copies for piece, copies in pieces) > MAX_EXPANDED_CHARS:
        raise InputError(f"pipeline layout {short(text)} expands to more than "
                         f"{MAX_EXPANDED_CHARS.cited} layer characters")
    return "".join(piece * copies for piece, copies in pieces)


def _copies(text: str, digits: str) -> int:
    """A repeat count, refused (before ``int`` reads it) beyond :data:`~sappkit.limits.MAX_EXPANDED_CHARS`."""
    if len(digits.lstrip("0")) > len(str(int(MAX_EXPANDED_CHARS))):
        raise InputError(f"pipeline layout {short(text)}: the repeat count {short(digits)} exceeds "
                         f"{MAX_EXPANDED_CHARS.cited}")
    return int(digits.lstrip("0") or "0")


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
