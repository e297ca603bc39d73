"""Model configs people have: presets of well-known shapes and Hugging Face ``config.json`` files.

``sappkit.models.get("llama3-70b")`` gives a preset :class:`~sappkit.TransformerConfig` (no weights, nothing
downloaded); :func:`read_model_config` reads a ``config.json`` (Llama, Qwen, Mixtral, DeepSeek-V3 keys).
"""

from .config_json import read_model_config
from .presets import PRESETS, get, names

__all__ = ["get", "names", "PRESETS", "read_model_config"]
