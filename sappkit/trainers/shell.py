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

import ast
import operator
import re
import shlex

from .._check import short
from ..errors import InputError

__all__ = ["read_flags", "shell_tokens"]

_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_ARITHMETIC = re.compile(r"\$\(\(([^()]*(?:\([^()]*\)[^()]*)*)\)\)")
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
              ast.Div: operator.floordiv, ast.Mod: operator.mod}


def shell_tokens(text: str) -> list[str]:
    """A launch script's words after variable substitution (see the module docstring)."""
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    known: dict[str, str] = {}
    lines = []
    for line in text.splitlines():
        line = _ARITHMETIC.sub(lambda match: _arithmetic(match.group(1)), _substitute(line, known))
        assignment = _ASSIGNMENT.match(line)
        if assignment and not assignment.group(2).lstrip().startswith("("):
            try:
                value = shlex.split(assignment.group(2), comments=True)
            except ValueError:
                value = []
            known[assignment.group(1)] = " ".join(value)
        lines.append(line)
    try:
        return shlex.split("\n".join(lines), comments=True)
    except ValueError as error:
        raise InputError(f"the launch script does not split into words as a shell would ({error})") from None


def _substitute(line: str, known: dict[str, str]) -> str:
    def value(match):
        name = match.group(1) or match.group(3)
        if name in known:
            return known[name]
        if match.group(2) is not None:
            return match.group(2)
        return match.group(0)  # left for read_flags to report if a flag needs it

    return _REFERENCE.sub(value, line)


def _arithmetic(expression: str) -> str:
    """The integer value of a ``$((...))`` whose variables are all known, else the expression unchanged."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
        return str(_evaluate(tree.body))
    except (SyntaxError, ValueError, ZeroDivisionError, KeyError):
        return f"$(({expression}))"


def _evaluate(node) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError("not integer arithmetic")


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
