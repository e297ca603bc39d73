"""Command lines as launch scripts write them: flags read out of a shell script or an argument list.

Megatron-LM runs are launched by scripts that set variables (``PP=8``,
``export TP=4``, ``WORLD_SIZE=$((GPUS_PER_NODE*NNODES))``), gather flags in
arrays (``MODEL_ARGS=( --num-layers 80 ... )``) and pass them to
``torchrun pretrain_gpt.py``. :func:`read_flags` reads such a script without
running it: line continuations joined, comments dropped, scalar variables
substituted in the order the script defines them (``$NAME``, ``${NAME}``,
``${NAME:-default}``, integer ``$((...))``), then every known ``--flag`` and
its value taken wherever it appears, the last occurrence winning as in
``argparse``.
"""

from __future__ import annotations

import operator
import re
import shlex
from collections import deque

from .._check import short
from ..errors import InputError
from ..limits import MAX_EXPANDED_CHARS, MAX_NESTING

__all__ = ["read_flags", "shell_tokens"]

_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
#: A value a shell reads as its text alone: one word, or one quoted string without escapes or quotes inside.
_PLAIN_VALUE = re.compile(r"\s*(?:\"([^\"\\`$]*)\"|'([^']*)'|([^\s\"'\\#;&|<>()`$]*))\s*")
_ARITHMETIC = re.compile(r"\$\(\(([^()]*(?:\([^()]*\)[^()]*)*)\)\)")


def shell_tokens(text: str) -> list[str]:
    """A launch script's words after variable substitution (see the module docstring).

    The script may expand to :data:`~sappkit.limits.MAX_EXPANDED_CHARS` characters at most (variables that
    double line by line are refused before they are built), and each ``$((...))`` is evaluated without
    recursion on its terms, over integers of at most 64 bits.
    """
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    _check_expansion(len(text))
    known: dict[str, str] = {}
    lines, total = [], 0
    for line in text.splitlines():
        line = _ARITHMETIC.sub(lambda match: _arithmetic(match.group(1), known),
                               _substitute(line, known, total))
        total += len(line) + 1
        _check_expansion(total)
        assignment = _ASSIGNMENT.match(line)
        if assignment and not assignment.group(2).lstrip().startswith("("):
            known[assignment.group(1)] = _assigned(assignment.group(2))
        lines.append(line)
    try:
        return shlex.split("\n".join(lines), comments=True)
    except ValueError as error:
        raise InputError(f"the launch script does not split into words as a shell would ({error})") from None


def _assigned(value: str) -> str:
    """The value an assignment gives its variable, its words joined by spaces: a plain word or quoted string as
    written (a regular expression, linear in its length), anything else as ``shlex`` splits it."""
    plain = _PLAIN_VALUE.fullmatch(value)
    if plain:
        return next((group for group in plain.groups() if group is not None), "")
    try:
        return " ".join(shlex.split(value, comments=True))
    except ValueError:
        return ""


def _check_expansion(characters: int) -> None:
    if characters > MAX_EXPANDED_CHARS:
        raise InputError(f"the launch script expands to more than {MAX_EXPANDED_CHARS.cited} characters once its "
                         "variables are substituted; sappkit reads scripts within that")


def _substitute(line: str, known: dict[str, str], used: int) -> str:
    """``line`` with its known variables substituted, refused as soon as the script (``used`` characters before
    this line) grows past :data:`~sappkit.limits.MAX_EXPANDED_CHARS`."""
    pieces, size, last = [], 0, 0
    for match in _REFERENCE.finditer(line):
        name = match.group(1) or match.group(3)
        if name in known:
            value = known[name]
        elif match.group(2) is not None:
            value = match.group(2)
        else:
            value = match.group(0)  # left for read_flags to report if a flag needs it
        size += match.start() - last + len(value)
        _check_expansion(used + size)
        pieces += [line[last:match.start()], value]
        last = match.end()
    return "".join(pieces) + line[last:]


def _arithmetic(expression: str, known: dict[str, str]) -> str:
    """The integer value of a ``$((...))`` whose variables are all known, else the expression unchanged.

    A bomb (an operand of more than 19 digits, a value past 64 bits, nesting past
    :data:`~sappkit.limits.MAX_NESTING`) is an :class:`~sappkit.InputError`.
    """
    try:
        return str(_Arithmetic(expression, known).value())
    except _NotEvaluated:
        return f"$(({expression}))"


class _NotEvaluated(Exception):
    """A ``$((...))`` sappkit leaves as written: an unknown variable, or syntax beyond integer arithmetic."""


#: Bash's integers: signed 64-bit.
_INT64 = 2**63
_TOKEN = re.compile(r"\s*(?:(0[xX][0-9a-fA-F]+|[0-9]+)|([A-Za-z_][A-Za-z0-9_]*)|(\*\*|[-+*/%()]))")
_BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": None, "%": None}


class _Arithmetic:
    """A recursive-descent reader of ``+ - * / % **`` and parentheses: loops over terms, recursion only on nesting."""

    def __init__(self, expression: str, known: dict[str, str]):
        self.text = f"$(({expression}))" if len(expression) <= 40 else f"a $((...)) of {len(expression):,} characters"
        self.known, self.depth = known, 0
        self.tokens = deque(self._tokens(expression))

    def _tokens(self, expression: str) -> list[tuple[str, object]]:
        tokens, i = [], 0
        while i < len(expression.rstrip()):
            match = _TOKEN.match(expression, i)
            if match is None:
                raise _NotEvaluated
            number, name, symbol = match.groups()
            tokens.append(("number", self._number(number)) if number else ("name", name) if name else
                          ("symbol", symbol))
            i = match.end()
        return tokens

    def _number(self, digits: str) -> int:
        if len(digits.lstrip("0xX") or "0") > (16 if digits[:2].lower() == "0x" else 19):
            raise InputError(f"{self.text}: operand {short(digits)} has more digits than a 64-bit "
                             "integer, which is all a shell computes")
        return self._checked(int(digits, 16) if digits[:2].lower() == "0x" else int(digits))

    def _checked(self, value: int) -> int:
        if not -_INT64 <= value < _INT64:
            raise InputError(f"{self.text} overflows a 64-bit integer, which is all a shell computes")
        return value

    def value(self) -> int:
        result = self._sum()
        if self.tokens:
            raise _NotEvaluated
        return result

    def _take(self, *symbols: str) -> str | None:
        if self.tokens and self.tokens[0][0] == "symbol" and self.tokens[0][1] in symbols:
            return self.tokens.popleft()[1]
        return None

    def _sum(self) -> int:
        result = self._product()
        while (symbol := self._take("+", "-")) is not None:
            result = self._checked(_BINARY[symbol](result, self._product()))
        return result

    def _product(self) -> int:
        result = self._unary()
        while (symbol := self._take("*", "/", "%")) is not None:
            right = self._unary()
            if symbol != "*" and right == 0:
                raise InputError(f"{self.text} divides by zero")
            result = self._checked(result * right if symbol == "*" else int(result / right) if symbol == "/"
                                   else result - right * int(result / right))
        return result

    def _unary(self) -> int:
        signs = 1
        while (symbol := self._take("+", "-")) is not None:
            signs = -signs if symbol == "-" else signs
        base = self._atom()
        if self._take("**") is None:
            return signs * base
        exponent = self._nested(self._unary)
        if exponent < 0:
            raise _NotEvaluated
        if abs(base) > 1 and exponent >= 64:
            return self._checked(_INT64 * signs)
        return signs * self._checked(base ** exponent)

    def _nested(self, read):
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise InputError(f"{self.text} nests deeper than {MAX_NESTING.cited} levels")
        try:
            return read()
        finally:
            self.depth -= 1

    def _atom(self) -> int:
        if not self.tokens:
            raise _NotEvaluated
        kind, token = self.tokens.popleft()
        if kind == "number":
            return token
        if kind == "name":
            value = self.known.get(token, "").strip()
            if not re.fullmatch(r"-?[0-9]{1,19}", value):
                raise _NotEvaluated
            return self._checked(int(value))
        if token != "(":
            raise _NotEvaluated
        result = self._nested(self._sum)
        if self._take(")") is None:
            raise _NotEvaluated
        return result


def read_flags(words, spec: dict[str, str], *, what: str) -> dict[str, object]:
    """``{flag: value}`` for every flag of ``spec`` in ``words`` (its kind: ``int``, ``str``, ``bool``, ``list``).

    ``--flag value`` and ``--flag=value`` both count; a ``list`` flag takes
    the words up to the next ``--flag``; a ``bool`` flag is True when present.
    Unknown flags are skipped. A value that is not of the flag's kind, or
    still holds an unset shell variable, is an :class:`~sappkit.InputError`
    naming the flag.

    Examples
    --------
    >>> read_flags(["--num-layers=8", "--sequence-parallel", "--recompute-modules", "core_attn", "mlp"],
    ...            {"--num-layers": "int", "--sequence-parallel": "bool", "--recompute-modules": "list"},
    ...            what="Megatron-LM arguments")
    {'--num-layers': 8, '--sequence-parallel': True, '--recompute-modules': ['core_attn', 'mlp']}
    """
    words = [str(word) for word in words]
    found: dict[str, object] = {}
    i = 0
    while i < len(words):
        flag, _, inline = words[i].partition("=")
        kind = spec.get(flag.replace("_", "-") if flag.startswith("--") else flag)
        i += 1
        if kind is None:
            continue
        flag = flag.replace("_", "-")
        if kind == "bool":
            found[flag] = True
            continue
        if inline:
            values = [inline]
        elif kind == "list":
            values = []
            while i < len(words) and not words[i].startswith("--"):
                values.append(words[i])
                i += 1
        else:
            if i >= len(words) or words[i].startswith("--"):
                raise InputError(f"{what}: {flag} needs a value")
            values = [words[i]]
            i += 1
        found[flag] = _value(flag, kind, values, what)
    return found


def _value(flag: str, kind: str, values: list[str], what: str):
    for value in values:
        unset = _REFERENCE.search(value) or _ARITHMETIC.search(value)
        if unset:
            raise InputError(f"{what}: {flag} is {short(value)}, which uses {unset.group(0)} and the script "
                             "never sets it; set it in the script or pass the arguments themselves")
    if kind == "list":
        return values
    if kind == "int":
        try:
            return int(values[0])
        except ValueError:
            raise InputError(f"{what}: {flag} must be an integer; got {short(values[0])}") from None
    return values[0]
