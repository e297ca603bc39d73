"""Hardware files: TOML tables read into a device or a cluster, generically over the dataclass's fields.

A hardware file is one TOML table: ``kind`` (``"device"`` or ``"cluster"``),
optionally ``base`` (a preset name or another file, relative to this one,
whose fields this one overrides) and ``source`` (where the numbers come from),
then any of the class's fields by name. A field that is itself a device (a
cluster's ``device``) is a preset name, a file, or an inline table. The
shipped presets are such files (``sappkit/hardware/presets/``, each number's
source beside it); a file without ``name`` is named after its file.

This module knows no class: :class:`~sappkit.hardware.DeviceConfig` and
:class:`~sappkit.hardware.Cluster` call it with themselves (their
``FILE_KIND``), so the classes import it and it imports neither.

Examples
--------
>>> from sappkit.hardware import DeviceConfig
>>> read(DeviceConfig, "h200").hbm_gb
141.0
>>> print(as_toml(DeviceConfig(tflops=100.0, name="mine"), notes={"tflops": "measured"}))
kind = "device"
tflops = 100.0  # measured
mfu = 0.4
link_gbs = 50.0
hbm_gbs = 1600.0
name = "mine"
hbm_gb = 64.0
matmul_half_gflop = 0.0
hbm_efficiency = 1.0
kernel_us = 0.0
comm_sm_share = 0.12
reserved_mib = 2048.0
expert_half_tokens = 0.0
<BLANKLINE>
"""

from __future__ import annotations

import dataclasses
import json
import typing
from functools import cache
from pathlib import Path

from .._files import as_path, load_toml
from ..errors import InputError

__all__ = ["PRESET_FOLDER", "preset_names", "read", "as_toml"]

#: The shipped presets, one TOML file each.
PRESET_FOLDER = Path(__file__).resolve().parent / "presets"
#: Keys of a hardware file that are not fields.
_META = ("kind", "base", "source")


@cache
def preset_names(kind: str) -> tuple[str, ...]:
    """The names of the shipped presets of ``kind`` (``"device"`` or ``"cluster"``), by file name."""
    return tuple(path.stem for path in sorted(PRESET_FOLDER.glob("*.toml"))
                 if load_toml(path, "a hardware file").get("kind") == kind)


def read(config: type, source, overrides: dict | None = None, *, relative_to: Path | None = None):
    """The ``config`` (a dataclass with ``FILE_KIND``) that the preset or file ``source`` describes, with
    ``overrides`` (field -> value; a preset name or file for a nested device) applied."""
    path = _resolve(config.FILE_KIND, source, relative_to)
    built = _shipped(config, path) if path.parent == PRESET_FOLDER else _read(config, path)
    if not overrides:
        return built
    overrides = dict(overrides)
    known = [field.name for field in dataclasses.fields(config)]
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise InputError(f"{config.FILE_KIND} preset {source!r} has no field {unknown[0]!r}; "
                         f"its fields: {', '.join(known)}")
    hints = typing.get_type_hints(config)
    for key, value in overrides.items():
        if isinstance(value, str | Path) and dataclasses.is_dataclass(hints[key]):
            overrides[key] = read(hints[key], value)
    return dataclasses.replace(built, **overrides)


def _read(config: type, path: Path):
    return _build(config, path, _fields(config, load_toml(path, _what(config)), path, ()))


@cache
def _shipped(config: type, path: Path):
    """A shipped preset, read once (the files ship with the package; the configs are frozen)."""
    return _read(config, path)


def _what(config: type) -> str:
    return f"a {config.FILE_KIND} file (TOML: kind = {config.FILE_KIND!r} and {config.__name__}'s fields)"


def _resolve(kind: str, source, relative_to: Path | None) -> Path:
    if isinstance(source, str) and source in preset_names(kind):
        return PRESET_FOLDER / f"{source}.toml"
    if isinstance(source, Path) or (isinstance(source, str) and source.endswith(".toml")):
        path = as_path(kind, source)
        return path if relative_to is None or path.is_absolute() else relative_to / path
    raise InputError(f"{kind} must be one of {', '.join(map(repr, preset_names(kind)))} or a hardware file "
                     f"(.toml); got {source!r}")


def _fields(config: type, table: dict, path: Path, seen: tuple) -> dict:
    """The fields ``table`` (read from ``path``) gives ``config``, over those of its ``base``."""
    kind = config.FILE_KIND
    if table.get("kind") != kind:
        raise InputError(f"{path}: kind must be {kind!r} (a {config.__name__} file); got {table.get('kind')!r}")
    fields = {}
    if "base" in table:
        base = _resolve(kind, table["base"], path.parent)
        if base.resolve() in seen:
            raise InputError(f"{path}: base {table['base']!r} is based on this file again")
        fields = _fields(config, load_toml(base, _what(config)), base, (*seen, path.resolve()))
    names = [field.name for field in dataclasses.fields(config)]
    hints = typing.get_type_hints(config)
    for key, value in table.items():
        if key in _META:
            continue
        if key not in names:
            raise InputError(f"{path}: key {key!r} is not a {kind} field; expected one of "
                             f"{', '.join((*_META, *names))}")
        if dataclasses.is_dataclass(hints[key]):
            value = _nested(hints[key], key, value, path)
        fields[key] = value
    if "name" not in table:
        fields["name"] = path.stem
    return fields


def _nested(config: type, key: str, value, path: Path):
    """A nested dataclass field's value: a preset name, a file (relative to ``path``) or an inline table."""
    if isinstance(value, dict):
        inline = {"kind": config.FILE_KIND, "name": "custom", **value}
        return _build(config, path, _fields(config, inline, path, ()), key)
    if isinstance(value, str):
        try:
            return read(config, value, relative_to=path.parent)
        except InputError as error:
            raise InputError(f"{path}: key {key!r}: {error}") from None
    raise InputError(f"{path}: key {key!r} must be a preset name, a file or a table; got {value!r}")


def _build(config: type, path: Path, fields: dict, key: str | None = None):
    try:
        return config(**fields)
    except (InputError, TypeError) as error:
        where = f"{path}: " if key is None else f"{path}: key {key!r}: "
        raise InputError(where + str(error)) from None


def as_toml(config, *, notes: dict | None = None, source: str | None = None) -> str:
    """``config`` (a device or cluster) as a hardware file's text, ``notes`` (field -> text) as comments beside
    the numbers; ``None`` fields are left out (their default)."""
    notes = notes or {}
    lines = [f"kind = {json.dumps(config.FILE_KIND)}"] + ([f"source = {json.dumps(source)}"] if source else [])
    tables = []
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            tables += ["", f"[{field.name}]", *as_toml(value, notes=notes.get(field.name)).splitlines()[1:]]
        elif value is not None:
            note = f"  # {notes[field.name]}" if field.name in notes else ""
            lines.append(f"{field.name} = {json.dumps(value)}{note}")
    return "\n".join(lines + tables) + "\n"
