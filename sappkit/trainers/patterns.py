"""Whether a regular expression's backtracking stays polynomial: the layer patterns a trace is read with.

Python's ``re`` backtracks. It takes exponential time only where a repeat
can split the same text into its iterations in many ways: ``(a+)+``,
``(a|a)+``, ``(a?b?)*``, ``(\\w+\\d?)+``. A repeat whose every iteration is
told apart by the next character cannot: each character then leaves one way
on, so ``(x|y)+``, ``(attn|mlp)+``, ``(\\w+\\.)*layers`` or ``(\\d+,)+``
run in linear time per start, however long the name. :func:`exponential_repeat`
finds the first repeat of the first kind, so :func:`sappkit.read_profile_times`
refuses only those.

The rule, for every repeat ``R{m,n}`` (``n > 1``) and inside its body, which
may run again: at each inner repeat, the characters that start another of
its iterations must differ from those that may come next (the rest of the
body, then the body's next iteration); at each alternation, the branches must
start with different characters (a branch that matches nothing starts with
what comes next). Characters are compared on a sample: ASCII, the pattern's
own characters and a few beyond ASCII of each class (``\\w``, ``\\d``,
``\\s``). A back-reference matches anything. An atomic group or a
possessive repeat does not backtrack, and is not looked into. Repeats at the
top level may be ambiguous where they end (``.*foo.*``): that costs a
polynomial, and at most :data:`MAX_AMBIGUOUS_ENDS` of them are allowed in a
row, as each multiplies the work by a name's length.
"""

from __future__ import annotations

import re
import re._constants as C
import re._parser as parser

__all__ = ["exponential_repeat", "MAX_AMBIGUOUS_ENDS"]

#: Top-level repeats whose end is ambiguous, allowed in one pattern (each multiplies the work by the name's length).
MAX_AMBIGUOUS_ENDS = 4
_SAMPLE = "".join(map(chr, range(128))) + "\u00e9\u0416\u0663\u00a0\u2028\u4e2d"
_CATEGORY = {C.CATEGORY_DIGIT: r"\d", C.CATEGORY_NOT_DIGIT: r"\D", C.CATEGORY_SPACE: r"\s",
             C.CATEGORY_NOT_SPACE: r"\S", C.CATEGORY_WORD: r"\w", C.CATEGORY_NOT_WORD: r"\W"}
_REPEATS = (C.MAX_REPEAT, C.MIN_REPEAT)
_EMPTY: frozenset = frozenset()


def exponential_repeat(pattern: str) -> str | None:
    """Why ``pattern`` backtracks exponentially (its first such repeat, in words), or None when it does not.

    Examples
    --------
    >>> exponential_repeat(r"^(a+)+$")
    "the repeat 'a+' inside a repeat may end where it could go on"
    >>> exponential_repeat(r"(attn|mlp)+"), exponential_repeat(r"^(\\w+\\.)*layers\\.(\\d+)$")
    (None, None)
    >>> exponential_repeat(r"(a|ab)+")  # after an "a", the next character says which branch it was
    >>> exponential_repeat(r"(a|a)+")
    'an alternation inside a repeat has two branches that start alike'
    >>> exponential_repeat(r"(a?b?)+")
    "the optional 'a?' inside a repeat may match what comes next"
    """
    return _Walker(pattern).why()


class _Walker:
    """One pattern's character sets and the walk that finds an ambiguous repeat."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self.parsed = parser.parse(pattern)
        self.flags = self.parsed.state.flags
        self.universe = frozenset(_SAMPLE) | frozenset(pattern)
        self.ambiguous_ends = 0

    def why(self) -> str | None:
        found = self.walk(list(self.parsed), _EMPTY, repeated=False)
        if found is None and self.ambiguous_ends > MAX_AMBIGUOUS_ENDS:
            return (f"{self.ambiguous_ends} repeats may each end in many places (more than "
                    f"{MAX_AMBIGUOUS_ENDS}), and each multiplies the work by a name's length")
        return found

    # -- what a piece matches -------------------------------------------------------------------------------

    def atom(self, op, argument) -> frozenset:
        """The sample characters one character-matching item matches."""
        if op is C.LITERAL:
            chars = {chr(argument)}
        elif op is C.NOT_LITERAL:
            chars = self.universe - {chr(argument)}
        elif op is C.ANY:
            chars = self.universe - ({"\n"} if not self.flags & re.DOTALL else set())
        else:  # IN
            chars = self.charset(argument)
        if self.flags & re.IGNORECASE:
            chars = {variant for char in chars for variant in (char, char.lower(), char.upper())}
        return frozenset(chars)

    def charset(self, items) -> set:
        chars, negate = set(), False
        for op, argument in items:
            if op is C.NEGATE:
                negate = True
            elif op is C.LITERAL:
                chars.add(chr(argument))
            elif op is C.RANGE:
                chars |= {c for c in self.universe if argument[0] <= ord(c) <= argument[1]}
            elif op is C.CATEGORY:
                chars |= {c for c in self.universe if re.fullmatch(_CATEGORY.get(argument, "."), c)}
        return set(self.universe - chars) if negate else chars

    def first(self, items) -> tuple[frozenset, bool]:
        """``(characters a match of items can start with, whether items can match nothing)``."""
        start = set()
        for op, argument in items:
            chars, empty = self.item(op, argument)
            start |= chars
            if not empty:
                return frozenset(start), False
        return frozenset(start), True

    def item(self, op, argument) -> tuple[frozenset, bool]:
        if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
            return self.atom(op, argument), False
        if op is C.SUBPATTERN:
            return self.first(argument[-1])
        if op is C.ATOMIC_GROUP:
            return self.first(argument)
        if op in (*_REPEATS, C.POSSESSIVE_REPEAT):
            chars, empty = self.first(argument[2])
            return chars, empty or argument[0] == 0
        if op is C.BRANCH:
            firsts = [self.first(branch) for branch in argument[1]]
            return frozenset().union(*(chars for chars, _ in firsts)), any(empty for _, empty in firsts)
        if op is C.GROUPREF_EXISTS:
            firsts = [self.first(branch) for branch in argument[1:] if branch is not None]
            return frozenset().union(*(chars for chars, _ in firsts)), True
        if op is C.GROUPREF:
            return self.universe, True
        return _EMPTY, True  # anchors and lookarounds match no character

    # -- the walk -------------------------------------------------------------------------------------------

    def walk(self, items, follow: frozenset, *, repeated: bool) -> str | None:
        """The first ambiguity in ``items``, followed by ``follow``, inside a repeat's body when ``repeated``."""
        for i, (op, argument) in enumerate(items):
            rest, empty = self.first(items[i + 1:])
            after = rest | follow if empty else rest
            found = self.walk_item(op, argument, after, repeated=repeated)
            if found:
                return found
        return None

    def walk_item(self, op, argument, after: frozenset, *, repeated: bool) -> str | None:
        if op is C.SUBPATTERN:
            return self.walk(list(argument[-1]), after, repeated=repeated)
        if op in (C.ASSERT, C.ASSERT_NOT):
            return self.walk(list(argument[1]), _EMPTY, repeated=False)
        if op is C.BRANCH:
            return self.walk_branch(argument[1], after, repeated=repeated)
        if op is C.GROUPREF_EXISTS:
            return self.walk_branch([branch for branch in argument[1:] if branch is not None], after,
                                    repeated=repeated)
        if op in _REPEATS and argument[1] > 1:
            body = list(argument[2])
            start, _ = self.first(body)
            if start & after:
                if repeated:
                    return f"the repeat '{self.text(op, argument)}' inside a repeat may end where it could go on"
                self.ambiguous_ends += 1
            return self.walk(body, start | (after if repeated else _EMPTY), repeated=True)
        if op in _REPEATS:  # x? or x{0,1}: one iteration at most, an alternation of x and nothing
            if repeated and argument[0] == 0 and self.first(argument[2])[0] & after:
                return f"the optional '{self.text(op, argument)}' inside a repeat may match what comes next"
            return self.walk(list(argument[2]), after, repeated=repeated)
        return None

    def walk_branch(self, branches, after: frozenset, *, repeated: bool) -> str | None:
        if repeated:
            starts = []
            for branch in branches:
                chars, empty = self.first(branch)
                starts.append(chars | after if empty else chars)
            for i, chars in enumerate(starts):
                if any(chars & other for other in starts[i + 1:]):
                    return "an alternation inside a repeat has two branches that start alike"
        for branch in branches:
            found = self.walk(list(branch), after, repeated=repeated)
            if found:
                return found
        return None

    # -- words ----------------------------------------------------------------------------------------------

    def text(self, op, argument) -> str:
        low, high, body = argument
        suffix = {(0, C.MAXREPEAT): "*", (1, C.MAXREPEAT): "+", (0, 1): "?"}.get((low, high), f"{{{low},{high}}}")
        inner = self.text_of(body)
        return (inner if len(body) == 1 else f"({inner})") + suffix

    def text_of(self, items) -> str:
        """A short rendering of parsed items (literals as themselves, anything else as its kind)."""
        out = []
        for op, argument in items:
            if op is C.LITERAL:
                out.append(re.escape(chr(argument)) if chr(argument) in "|()*+?" else chr(argument))
            elif op is C.SUBPATTERN:
                out.append(f"({self.text_of(argument[-1])})")
            elif op in _REPEATS:
                out.append(self.text(op, argument))
            elif op is C.BRANCH:
                out.append("|".join(self.text_of(b) for b in argument[1]))
            elif op is C.IN:
                out.append(_CATEGORY.get(argument[0][1], "[...]") if len(argument) == 1 and argument[0][0] is
                           C.CATEGORY else "[...]")
            elif op is C.ANY:
                out.append(".")
            else:
                out.append("...")
        return "".join(out)
