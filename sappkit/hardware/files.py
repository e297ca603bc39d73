"""Hardware files, whichever their kind: the shipped presets by name, :func:`load` and :func:`write`.

The presets are files (``sappkit/hardware/presets/``, one per device or
cluster, each number's source beside it); a user's own file has the same
form (:mod:`sappkit.hardware.tables`) and may start from a preset
(``base = "dgx-h100"``) and override any field.

Examples
--------
>>> load(PRESET_FOLDER / "dgx-h100.toml").device.name
'h100-sxm'
>>> sorted(DEVICE_PRESETS)[:2]
['a100-40g', 'a100-80g']
"""

from __future__ import annotations

from .._files import as_path, load_toml, write_text
from ..errors import InputError
from .cluster import Cluster
from .device import DeviceConfig
from .tables import PRESET_FOLDER, as_toml, preset_names, read

__all__ = ["DEVICE_PRESETS", "CLUSTER_PRESETS", "KINDS", "load", "write"]

#: What a hardware file's ``kind`` reads into.
KINDS = {"device": DeviceConfig, "cluster": Cluster}
#: Device presets by name: the file of each.
DEVICE_PRESETS = {name: PRESET_FOLDER / f"{name}.toml" for name in preset_names("device")}
#: Cluster presets by name: the file of each.
CLUSTER_PRESETS = {name: PRESET_FOLDER / f"{name}.toml" for name in preset_names("cluster")}


def load(path, **overrides) -> DeviceConfig | Cluster:
    """The device or cluster the hardware file ``path`` describes (its ``kind`` says which), ``overrides``
    applied."""
    path = as_path("path", path)
    kind = load_toml(path, "a hardware file (TOML)").get("kind")
    if kind not in KINDS:
        raise InputError(f"{path}: kind must be one of {', '.join(map(repr, KINDS))}; got {kind!r}")
    return read(KINDS[kind], path, overrides)


def write(config: DeviceConfig | Cluster, path, *, notes: dict | None = None, source: str | None = None):
    """Write ``config`` as a hardware file that :func:`load` reads back equal; ``notes`` (field -> text) are
    comments beside the numbers. Returns the path."""
    if not isinstance(config, tuple(KINDS.values())):
        raise InputError(f"config must be a DeviceConfig or a Cluster; got {type(config).__name__}")
    return write_text(path, as_toml(config, notes=notes, source=source))
