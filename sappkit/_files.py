"""Reading and writing the files sappkit takes and makes: one set of checks for every reader and writer.

- :func:`as_path`: a path argument, refused when it is not one (``None``, a
  number, bytes, a NUL character, longer than the system opens).
- :func:`read_text`: a file read whole as UTF-8 text, refused when missing,
  a folder, binary, in another encoding or above
  :data:`~sappkit.limits.MAX_FILE_MB`.
- :func:`load_json`, :func:`load_yaml` and :func:`load_toml`: a document, refused when it does
  not parse (one line naming the problem and its place), nests too deeply
  for the parser, or (YAML) holds more than :data:`~sappkit.limits.MAX_DOCUMENT_VALUES`
  values once its aliases are expanded (an alias bomb) or refers to itself;
  :func:`read_csv`: a CSV file as a frame.
- :func:`output_path` and :func:`write_file`: a file written whole or not at
  all (to a temporary file beside it, then renamed), refused with the
  reason when its folder is missing or it is a folder.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
from collections.abc import Callable
from pathlib import Path

from ._check import short
from .errors import InputError
from .limits import MAX_DOCUMENT_VALUES, MAX_FILE_MB, MAX_NESTING

__all__ = ["as_path", "shown", "read_text", "load_json", "load_yaml", "load_toml", "read_csv", "output_path",
           "write_file", "write_text", "BUNDLED_DATA", "bundled"]

#: The bundled example inputs: inside the installed package (``pip install .`` ships the repository's ``data/``
#: folder as ``sappkit/data``, see pyproject.toml), else the ``data/`` folder beside the package (a source checkout,
#: or ``pip install -e .``).
_PACKAGED = Path(__file__).resolve().parent / "data"
BUNDLED_DATA = _PACKAGED if _PACKAGED.is_dir() else _PACKAGED.parent.parent / "data"


def as_path(name: str, value) -> Path:
    """``value`` as a Path, or raise naming ``name`` when it is not a path (a str or an os.PathLike).

    Examples
    --------
    >>> as_path("path", "model.json")
    PosixPath('model.json')
    >>> as_path("path", None)
    Traceback (most recent call last):
    ...
    sappkit.errors.InputError: path must be a file path (a str or a pathlib.Path); got None
    """
    try:
        text = os.fspath(value)
    except TypeError:
        text = None
    if not isinstance(text, str) or not text:
        raise InputError(f"{name} must be a file path (a str or a pathlib.Path); got {short(value)}")
    if "\0" in text:
        raise InputError(f"{name} is {short(text)}, which holds a NUL character; expected a file path")
    if len(text) >= _PATH_MAX:
        raise InputError(f"{name} is {short(text)}; expected a path shorter than the system's {_PATH_MAX} characters")
    return Path(text)


#: The longest path the system opens, in characters (Linux's PATH_MAX).
_PATH_MAX = 4096


def shown(path: Path) -> str:
    """``path`` for a message: whole, or its start and end when very long (a name too long to open)."""
    text = str(path)
    return text if len(text) <= 160 else f"{text[:80]}...{text[-60:]}"


def read_text(path: Path, what: str) -> str:
    """The file at ``path`` as text, or an InputError saying why it cannot be read as ``what``."""
    try:
        if not path.exists():
            raise InputError(f"{path}: no such file; expected {what}")
        if not path.is_file():
            raise InputError(f"{path}: not a file; expected {what}")
        size = path.stat().st_size
        if size > MAX_FILE_MB * 2**20:
            raise InputError(f"{path}: {size / 2**20:.1f} MB; sappkit reads files of at most {MAX_FILE_MB.cited} MB "
                             f"(expected {what})")
        data = path.read_bytes()
    except OSError as error:
        raise InputError(f"{shown(path)}: cannot read ({error.strerror or error}); expected {what}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text; expected {what}") from None
    if "\0" in text:
        raise InputError(f"{path}: a binary file (it holds NUL bytes); expected {what}")
    return text


def load_json(path: Path, what: str):
    """The JSON document at ``path`` (see the module docstring for what is refused)."""
    return _document(path, what, "JSON", json.loads, _json_problem, (ValueError,))


def load_yaml(path: Path, what: str):
    """The YAML document at ``path`` (safe types only; see the module docstring for what is refused)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where installed: ~10x faster

    def parse(text: str):
        # libyaml's composer recurses in C, where a deep document overflows the stack (a crash, not a
        # RecursionError): its scanner, which does not recurse, measures the nesting first.
        opens = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken, yaml.FlowMappingStartToken,
                 yaml.FlowSequenceStartToken)
        closes = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)
        depth = 0
        try:
            for token in yaml.scan(text, Loader=loader):
                depth += 1 if isinstance(token, opens) else -1 if isinstance(token, closes) else 0
                if depth > MAX_NESTING:
                    raise RecursionError
            return yaml.load(text, Loader=loader)
        except yaml.YAMLError:  # worded as the pure-Python parser words it, with or without libyaml
            return yaml.load(text, Loader=yaml.SafeLoader)

    return _document(path, what, "YAML", parse, _yaml_problem, (ValueError, yaml.YAMLError), aliases=True)


def load_toml(path: Path, what: str):
    """The TOML document at ``path`` (see the module docstring for what is refused)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    return _document(path, what, "TOML", tomllib.loads, lambda error: " ".join(str(error).split()),
                     (ValueError,))


def _document(path: Path, what: str, language: str, parse, problem, errors: tuple, *, aliases: bool = False):
    """``parse`` of the file's text, or an InputError with the parse error (one of ``errors``, worded by ``problem``)
    on one line. A ValueError is also what an integer beyond Python's digit limit raises. With ``aliases`` (YAML,
    whose parts may be shared) the values are counted as expanded; JSON and TOML parse to trees no larger than
    their text, which :data:`~sappkit.limits.MAX_FILE_MB` bounds."""
    text = read_text(path, what)
    try:
        document = parse(text)
    except RecursionError:
        reason = "nested too deeply to read"
    except errors as error:
        reason = problem(error)
    else:
        if aliases:
            _count_values(path, document, what)
        return document
    raise InputError(f"{path}: not valid {language} ({reason}); expected {what}")


#: Python's limit on the digits of an integer read from text.
_DIGITS = 4300


def _json_problem(error: Exception) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at line {error.lineno} column {error.colno}"
    return f"a number with more than {_DIGITS} digits"


def _yaml_problem(error: Exception) -> str:
    import yaml

    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        place = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        return " ".join(str(error.problem or error.context).split()) + place
    if isinstance(error, yaml.YAMLError):
        return " ".join(str(error).split())
    return f"a number with more than {_DIGITS} digits"


def read_csv(path: Path, what: str, expected: str, **options):
    """The CSV file at ``path`` as a DataFrame (``options`` for ``pandas.read_csv``); ``expected`` words its content."""
    import pandas as pd

    text = read_text(path, what)
    try:
        return pd.read_csv(io.StringIO(text), **options)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as error:
        raise InputError(f"{path}: not a readable CSV ({' '.join(str(error).split())}); "
                         f"expected {expected}") from None


def _count_values(path: Path, document, what: str) -> None:
    """Refuse a document that holds too many values once shared (aliased) parts are counted each time."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack = [(document, False)]
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, list | dict) or id(node) in sizes:
            continue
        children = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        if not children_done:
            if id(node) in open_nodes:
                raise InputError(f"{path}: a YAML alias refers to a value that contains it; expected {what} "
                                 "without recursive aliases")
            open_nodes.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in children if isinstance(child, list | dict))
            continue
        open_nodes.discard(id(node))
        sizes[id(node)] = 1 + sum(sizes[id(child)] if isinstance(child, list | dict) else 1 for child in children)
        if sizes[id(node)] > MAX_DOCUMENT_VALUES:
            raise InputError(f"{path}: holds more than {MAX_DOCUMENT_VALUES.cited} values once its YAML aliases "
                             f"are expanded; expected {what}")


def output_path(name: str, value) -> Path:
    """``value`` as a path a file can be written to: not a folder, in a folder that exists.

    Checking before a long computation means the computation is not lost to a typo.
    """
    path = as_path(name, value)
    try:
        reason = errno.EISDIR if path.is_dir() else errno.ENOENT if not path.parent.exists() else \
            errno.ENOTDIR if not path.parent.is_dir() else None
    except OSError as error:
        reason = error.errno
    if reason is not None:
        raise InputError(f"{shown(path)}: cannot write ({os.strerror(reason)}); expected a writable file path")
    return path


def write_file(path, write: Callable[[Path], None], *, name: str = "path") -> Path:
    """Call ``write(temporary)`` and rename the temporary file to ``path``: the file is whole or untouched."""
    path = output_path(name, path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        write(temporary)
        os.replace(temporary, path)
    except OSError as error:
        raise InputError(f"{shown(path)}: cannot write ({error.strerror or error}); "
                         "expected a writable file path") from None
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
    return path


def write_text(path, text: str, *, name: str = "path") -> Path:
    """Write ``text`` as UTF-8 to ``path``, whole or not at all (:func:`write_file`)."""
    return write_file(path, lambda temporary: temporary.write_text(text, encoding="utf-8"), name=name)


def bundled(name: str) -> Path:
    """The path of a bundled data file, or an error saying where it was looked for.

    Examples
    --------
    >>> bundled("llama2_70b.json").name
    'llama2_70b.json'
    """
    path = BUNDLED_DATA / name
    if not path.is_file():
        raise InputError(f"bundled data file {name!r} is not in {BUNDLED_DATA}; the bundled data ships with sappkit "
                         "(reinstall it: pip install sappkit, or pip install -e . from a clone)")
    return path
