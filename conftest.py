"""Collection for the whole tree: a plain install (no PyTorch) skips what needs the ``[torch]`` extra."""

from importlib.util import find_spec

collect_ignore = [] if find_spec("torch") else ["sappkit/torch", "notebooks/05_pytorch.ipynb"]
