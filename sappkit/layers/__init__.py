"""The layer table: what one layer of each kind costs in memory and time, per recompute option.

Built by hand, read from MindFormers/SAPP layer JSON or CSV, or estimated
analytically from a transformer's shape; every other model reads it.
"""

from .configs import DeviceConfig, KernelConfig, ParallelConfig, TransformerConfig
from .estimate import estimate_layers
from .flops import model_flops
from .formats import read_layers_csv, write_layers_csv
from .mindformers import read_layers_json, write_layers_json
from .table import LayerTable, as_layer_table

__all__ = ["LayerTable", "as_layer_table", "read_layers_json", "write_layers_json", "read_layers_csv",
           "write_layers_csv", "TransformerConfig", "ParallelConfig", "DeviceConfig", "KernelConfig", "estimate_layers",
           "model_flops"]
