"""Layer tables on disk as the MindFormers/SAPP layer description JSON.

The JSON is the file MindFormers' pipeline balancer (SAPP, release r1.5.0)
reads: an object with ``layers_description`` (a list, model order) and an
optional ``stage_const_mem`` (MB every stage holds, here
:attr:`LayerTable.const_mb`). Each layer has

============================  ============================================
``name``                      the kind
``type``                      ``HEAD``, ``BODY`` or ``TAIL``
``nb_layer``                  layers of the kind (1 for head and tail)
``time``                      the layer's time (see below)
``memory_parameter``          MB the layer holds whatever it runs
``memory_activation``         MB kept per micro-batch, option ``none``
``memory_select_rec``         ... option ``selective``
``memory_select_comm``        ... option ``comm``
``memory_both_comm_select``   ... option ``both``
``memory_recompute``          ... option ``full``
============================  ============================================

A body option whose memory key is absent or ``null`` is not considered (the
original also drops a memory of 0; sappkit keeps it). Times: the forward is
``forward_time`` when given, else ``time``; the backward base is ``2 * time``
and option ``r`` runs ``(1 + coef_r) * base`` with ``coef_r`` from
``backward_coef``, ``select_rec_coef``, ``select_comm_coef``,
``both_comm_select_coef``, ``recompute_coef`` (defaults 0, 0.04, 0.125,
0.165, 0.5), unless its explicit backward ``backward_time``,
``select_rec_time``, ``select_comm_time``, ``both_comm_select_time`` or
``recompute_time`` is given (the original's misspelt ``"recompute_time "``,
with a trailing space, is read too; the writer writes the correct key; an
explicit 0 is a time of 0, where the original falls back to the coefficient). Releases before February 2025 split
``time`` as forward ``time / 3`` and base ``2 * time / 3``:
``time_semantics="legacy"``. Head and tail have one option, ``none``.

sappkit extensions (the original ignores them): the top-level
``time_unit`` names the unit of every time in the file (e.g. ``"ms"``, as
the writer writes the table's :attr:`~sappkit.LayerTable.time_unit`);
without it the times are the original's relative ones, read in
``"MindFormers units"`` unless the reader is told the unit. ``model_name`` (the
original's own key for the submodule) is the ``module`` column;
``memory_activation``, ``backward_time`` and ``backward_coef`` also apply
to head and tail; ``memory_once_mb``, ``working_mb``, ``first_working_mb``
and ``grad_mb`` hold those columns, each a number (every option) or an
object mapping option name to number. The top-level keys ``name``,
``pre_defined_layer`` and ``auto_partition_layer`` of the original's model
files are accepted and not used. Any other key is refused.

The writer states every time explicitly (``forward_time`` and each
option's backward), so its files read the same under both time semantics
and round-trip exactly.
"""

from __future__ import annotations

import difflib
import json
import math
from pathlib import Path
from typing import Literal

import pandas as pd

from .._check import as_finite, as_whole, check_choice, short
from .._files import as_path, load_json, write_text
from ..columns import (
    ACTIVATION_MB, BACKWARD_TIME, BODY, COUNT, FIRST_WORKING_MB, FORWARD_TIME, GRAD_MB, HEAD, KIND, LAYER_OPTIONAL,
    MEMORY_ONCE_MB, MODULE, OPTION, PARAM_MB, ROLE, SAPP_OPTIONS, TAIL, WORKING_MB,
)
from ..errors import InputError
from ..limits import MAX_LAYERS, MAX_MEMORY_MB, MAX_TIME
from .formats import _table
from .table import LayerTable, as_layer_table
from .units import MAX_UNIT_LENGTH, MINDFORMERS_UNIT, TIME_UNIT, check_time_unit

__all__ = ["read_layers_json", "write_layers_json"]

#: Per option: its memory key, explicit backward time key, coefficient key and default coefficient.
_OPTION_KEYS = {
    "none": ("memory_activation", "backward_time", "backward_coef", 0.0),
    "selective": ("memory_select_rec", "select_rec_time", "select_rec_coef", 0.04),
    "comm": ("memory_select_comm", "select_comm_time", "select_comm_coef", 0.125),
    "both": ("memory_both_comm_select", "both_comm_select_time", "both_comm_select_coef", 0.165),
    "full": ("memory_recompute", "recompute_time", "recompute_coef", 0.5),
}
#: The original's misspelling of a time key, read as the key it means.
_MISSPELT = {"recompute_time ": "recompute_time"}
_TYPES = {"HEAD": HEAD, "BODY": BODY, "TAIL": TAIL}
_EXTENSIONS = (MEMORY_ONCE_MB, WORKING_MB, FIRST_WORKING_MB, GRAD_MB)
_TOP_KEYS = ("layers_description", "stage_const_mem", TIME_UNIT, "name", "pre_defined_layer", "auto_partition_layer")
_LAYER_KEYS = ("name", "type", "nb_layer", "time", "forward_time", "memory_parameter", "model_name",
               *(key for keys in _OPTION_KEYS.values() for key in keys[:3]), *_MISSPELT, *_EXTENSIONS)


def read_layers_json(path, *, time_semantics: Literal["current", "legacy"] = "current",
                     time_unit: str | None = None) -> LayerTable:
    """Read a MindFormers/SAPP layer description JSON into a :class:`LayerTable`.

    Parameters
    ----------
    path : str or Path
        The JSON file (keys in the module docstring).
    time_semantics : {"current", "legacy"}
        ``"current"`` (r1.5.0 on): forward ``time``, backward base
        ``2 * time``; ``"legacy"`` (before February 2025): ``time / 3`` and
        ``2 * time / 3``. Explicit ``forward_time`` and per-option times win
        under both.
    time_unit : str, optional
        The unit of the file's times (e.g. ``"ms"``). Default: the file's own
        ``time_unit`` key, else ``"MindFormers units"`` (the original's
        relative time). Stating one the file contradicts is refused.

    Examples
    --------
    >>> import tempfile, json, pathlib
    >>> layers = [{"name": "block", "type": "BODY", "nb_layer": 4, "time": 10, "memory_parameter": 900,
    ...            "memory_activation": 300, "memory_recompute": 20}]
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "model.json"
    >>> _ = path.write_text(json.dumps({"layers_description": layers, "stage_const_mem": 2000}))
    >>> table = read_layers_json(path)
    >>> table.frame[["option", "forward_time", "backward_time", "activation_mb"]]
      option  forward_time  backward_time  activation_mb
    0   none          10.0           20.0          300.0
    1   full          10.0           30.0           20.0
    >>> table.const_mb, table.time_unit, read_layers_json(path, time_unit="ms").time_unit
    (2000.0, 'MindFormers units', 'ms')
    """
    time_semantics = check_choice("time_semantics", time_semantics, ("current", "legacy"))
    if time_unit is not None:
        time_unit = check_time_unit(time_unit)
    path = as_path("path", path)
    document = load_json(path, "a MindFormers layer description object")
    if not isinstance(document, dict):
        raise InputError(f"{path}: the top level is a {_json_type(document)}; expected an object "
                         "with key 'layers_description'")
    _refuse_unknown(path, "the top level", document, _TOP_KEYS)
    if "layers_description" not in document:
        raise InputError(f"{path}: the top level has no key 'layers_description'; expected the list of layers")
    described = document["layers_description"]
    if not isinstance(described, list) or not described:
        _fail(path, "", "layers_description", described, "a non-empty list of layer objects")
    const = document.get("stage_const_mem")
    const = 0.0 if const is None else _number(path, "", "stage_const_mem", const)
    unit = _unit(path, document.get(TIME_UNIT), time_unit)
    rows, seen = [], {}
    for index, layer in enumerate(described):
        where = f"layers_description[{index}]"
        if not isinstance(layer, dict):
            raise InputError(f"{path}: {where} is {_short(layer)}; expected a layer object")
        name = layer.get("name")
        if isinstance(name, str) and name:
            where = f"{where} (name {name!r})"
        rows += _layer_rows(path, where, layer, legacy=time_semantics == "legacy")
        if rows[-1][KIND] in seen:
            raise InputError(f"{path}: {where} repeats the name of layers_description[{seen[rows[-1][KIND]]}]; "
                             "each layer kind appears once")
        seen[rows[-1][KIND]] = index
    return _table(path, pd.DataFrame(rows), const, unit)


def _unit(path: Path, stated, given: str | None) -> str:
    """The file's time unit: what the reader was told, else the file's own key, else the relative unit."""
    if stated is not None:
        try:
            stated = check_time_unit(stated)
        except InputError:
            _fail(path, "", TIME_UNIT, stated, f"a short unit name (a non-empty string of at most "
                                               f"{MAX_UNIT_LENGTH} characters)")
    if given is not None and stated is not None and given != stated:
        raise InputError(f"{path}: the file states time_unit {stated!r} but time_unit={given!r} was given; "
                         "drop the argument or correct the file")
    return given or stated or MINDFORMERS_UNIT


def write_layers_json(layers, path) -> None:
    """Write a layer table as a MindFormers/SAPP layer description JSON.

    Every body kind's options must be SAPP options (``none``, ``selective``,
    ``comm``, ``both``, ``full``) sharing one forward time; the head and tail
    are written without their option name and read back as ``none``.
    ``stage_const_mem`` is the table's ``const_mb`` and ``time_unit`` its
    :attr:`~sappkit.LayerTable.time_unit`.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> rows = [dict(kind="block", role="body", count=4, param_mb=900, option=option, forward_time=10,
    ...              backward_time=backward, activation_mb=memory)
    ...         for option, backward, memory in [("none", 20, 300), ("full", 31, 20)]]
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "model.json"
    >>> write_layers_json(LayerTable(pd.DataFrame(rows), const_mb=2000), path)
    >>> read_layers_json(path).frame.equals(LayerTable(pd.DataFrame(rows)).frame)
    True
    """
    table = as_layer_table(layers)
    described = []
    for kind in dict.fromkeys(table.frame[KIND]):
        rows = table.rows(kind)
        first = rows.iloc[0]
        layer = {"name": kind, "type": first[ROLE].upper(), "model_name": first[MODULE],
                 "nb_layer": int(first[COUNT]), "time": None, "forward_time": None,
                 "memory_parameter": _plain(first[PARAM_MB])}
        if first[ROLE] == BODY:
            unknown = [option for option in rows.index if option not in _OPTION_KEYS]
            if unknown:
                raise InputError(f"layers kind {kind!r} has option(s) {', '.join(map(repr, unknown))}; the layer "
                                 f"JSON holds only {', '.join(map(repr, SAPP_OPTIONS))}")
            options = {option: rows.loc[option] for option in SAPP_OPTIONS if option in rows.index}
        else:
            options = {"none": first}
        forwards = {float(row[FORWARD_TIME]) for row in options.values()}
        if len(forwards) > 1:
            raise InputError(f"layers kind {kind!r} has forward_time {sorted(forwards)} across its options; "
                             "the layer JSON holds one forward time per kind")
        layer["time"] = layer["forward_time"] = _plain(forwards.pop())
        for option, row in options.items():
            memory_key, time_key = _OPTION_KEYS[option][:2]
            layer[memory_key] = _plain(row[ACTIVATION_MB])
            layer[time_key] = _plain(row[BACKWARD_TIME])
        layer.update(_extensions_out(options))
        described.append(layer)
    text = json.dumps({"stage_const_mem": _plain(table.const_mb), TIME_UNIT: table.time_unit,
                       "layers_description": described}, indent=2)
    write_text(path, text + "\n")


def _layer_rows(path: Path, where: str, layer: dict, *, legacy: bool) -> list[dict]:
    """The layer table rows of one JSON layer object, every key checked."""
    _refuse_unknown(path, where, layer, _LAYER_KEYS)
    name = _required(path, where, layer, "name", "the layer's kind name (a non-empty string)")
    if not isinstance(name, str) or not name:
        _fail(path, where, "name", name, "a non-empty string")
    kind = layer.get("type")
    if not isinstance(kind, str) or kind not in _TYPES:
        _required(path, where, layer, "type", f"one of {', '.join(map(repr, _TYPES))}")
        _fail(path, where, "type", kind, f"one of {', '.join(map(repr, _TYPES))}")
    role = _TYPES[kind]
    count = as_whole(_required(path, where, layer, "nb_layer", "the number of layers of this kind (an int >= 1)"))
    if count is None or count < 1:
        _fail(path, where, "nb_layer", layer["nb_layer"], "an int >= 1")
    if count > MAX_LAYERS:
        _fail(path, where, "nb_layer", layer["nb_layer"], f"an int <= {MAX_LAYERS.cited}")
    if role != BODY and count != 1:
        _fail(path, where, "nb_layer", layer["nb_layer"], f"1 (a {kind} layer is one layer)")
    time = _number(path, where, "time", _required(path, where, layer, "time", "the layer's time (a number >= 0)"))
    forward = _optional(path, where, layer, "forward_time")
    forward = (time / 3 if legacy else time) if forward is None else forward
    base = 2 * time / 3 if legacy else 2 * time
    param = _number(path, where, "memory_parameter",
                    _required(path, where, layer, "memory_parameter", "the parameter memory in MB (a number >= 0)"))
    module = LAYER_OPTIONAL[MODULE] if layer.get("model_name") is None else layer["model_name"]
    if not isinstance(module, str) or not module:
        _fail(path, where, "model_name", module, "a non-empty string (the submodule the layer belongs to)")
    options = _considered(path, where, layer, role)
    rows = []
    for option in options:
        memory_key, _, coef_key, default_coef = _OPTION_KEYS[option]
        coef = _optional(path, where, layer, coef_key)
        backward = _explicit_time(path, where, layer, option)
        if backward is None:
            backward = (1 + (default_coef if coef is None else coef)) * base
        memory = 0.0 if layer.get(memory_key) is None else _number(path, where, memory_key, layer[memory_key])
        rows.append({KIND: name, ROLE: role, COUNT: int(count), PARAM_MB: param, OPTION: option,
                     FORWARD_TIME: forward, BACKWARD_TIME: backward, ACTIVATION_MB: memory, MODULE: module})
    for key in _EXTENSIONS:
        for row, value in zip(rows, _extension_in(path, where, layer, key, options)):
            row[key] = value
    return rows


def _considered(path: Path, where: str, layer: dict, role: str) -> tuple[str, ...]:
    """The options a layer offers: body options whose memory is given; ``none`` alone for head and tail."""
    if role != BODY:
        for option, (memory_key, _, coef_key, _) in _OPTION_KEYS.items():
            given = [key for key in (memory_key, *_time_keys(option), coef_key) if key in layer]
            if option != "none" and given:
                raise InputError(f"{path}: {where} has key {given[0]!r}; a {layer['type']} layer has one option "
                                 "(none), so only memory_activation, backward_time and backward_coef apply")
        return ("none",)
    options = tuple(option for option, keys in _OPTION_KEYS.items() if layer.get(keys[0]) is not None)
    if not options:
        raise InputError(f"{path}: {where} has no activation memory; a BODY layer needs at least one of "
                         f"{', '.join(keys[0] for keys in _OPTION_KEYS.values())} (absent or null means the "
                         "option is not considered)")
    for option, (memory_key, *_) in _OPTION_KEYS.items():
        stated = [key for key in _time_keys(option) if layer.get(key) is not None]
        if option not in options and stated:
            raise InputError(f"{path}: {where} has key {stated[0]!r} but {memory_key!r} is absent or null, so "
                             f"option {option!r} is not considered; give its memory or drop the time")
    return options


def _time_keys(option: str) -> tuple[str, ...]:
    """The keys that may state an option's backward time: its own and the original's misspelling of it."""
    key = _OPTION_KEYS[option][1]
    return (key, *(wrong for wrong, meant in _MISSPELT.items() if meant == key))


def _explicit_time(path: Path, where: str, layer: dict, option: str) -> float | None:
    """An option's stated backward time, or None when the coefficient applies."""
    stated = {key: layer[key] for key in _time_keys(option) if layer.get(key) is not None}
    values = {key: _number(path, where, key, value) for key, value in stated.items()}
    if len(set(values.values())) > 1:
        raise InputError(f"{path}: {where} gives {' and '.join(f'{k!r} = {v!r}' for k, v in stated.items())}; "
                         "they are one time, state it once")
    return next(iter(values.values()), None)


def _extension_in(path: Path, where: str, layer: dict, key: str, options: tuple[str, ...]) -> list[float]:
    """Per option, the value of a sappkit extension key (a number, or an object by option name)."""
    value = layer.get(key)
    if value is None:
        return [math.nan if key == FIRST_WORKING_MB else LAYER_OPTIONAL[key]] * len(options)
    if not isinstance(value, dict):
        return [_number(path, where, key, value)] * len(options)
    if set(value) != set(options):
        _fail(path, where, key, value, f"a number or an object with exactly the keys {', '.join(options)}")
    return [_number(path, where, f"{key}.{option}", value[option]) for option in options]


def _extensions_out(options: dict[str, pd.Series]) -> dict:
    """The extension keys a layer needs so that it reads back with the same optional columns."""
    out = {}
    for key in _EXTENSIONS:
        values = {option: _plain(row[key]) for option, row in options.items()}
        default = {option: _plain(row[WORKING_MB]) for option, row in options.items()} \
            if key == FIRST_WORKING_MB else dict.fromkeys(options, LAYER_OPTIONAL[key])
        if values != default:
            out[key] = next(iter(values.values())) if len(set(values.values())) == 1 else values
    return out


def _refuse_unknown(path: Path, where: str, mapping: dict, known: tuple[str, ...]) -> None:
    for key in mapping:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InputError(f"{path}: {where} has unknown key {short(key)}{hint}; "
                             "see sappkit.read_layers_json for the keys it reads")


def _required(path: Path, where: str, layer: dict, key: str, expected: str):
    if layer.get(key) is None:
        raise InputError(f"{path}: {where} has no key {key!r}; expected {expected}")
    return layer[key]


def _optional(path: Path, where: str, layer: dict, key: str) -> float | None:
    return None if layer.get(key) is None else _number(path, where, key, layer[key])


def _number(path: Path, where: str, key: str, value) -> float:
    number = as_finite(value)
    if number is None or number < 0:
        _fail(path, where, key, value, "a number >= 0")
    # Memory keys hold MB; the others hold times or time coefficients.
    limit = MAX_MEMORY_MB if key.startswith("memory_") or key.split(".")[0] in (*_EXTENSIONS, "stage_const_mem") \
        else MAX_TIME
    if number > limit:
        _fail(path, where, key, value, f"a number <= {limit.cited}")
    return number


def _fail(path: Path, where: str, key: str, value, expected: str):
    raise InputError(f"{path}: {where + ' ' if where else ''}key {key!r} is {_short(value)}; expected {expected}")


def _short(value) -> str:
    """The value as :func:`~sappkit._check.short` shows it, a long string, list or object by its JSON type."""
    text = short(value)
    described = text.startswith(("a ", "an ")) and isinstance(value, dict | list | str)
    return f"a {_json_type(value)}" if described else text


def _json_type(value) -> str:
    return {dict: "object", list: "list", str: "string"}.get(type(value), type(value).__name__)


def _plain(value):
    """A JSON-friendly number: an int when whole, else the float itself (so it reads back exactly)."""
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < 2**53 else value
