"""The ``hardware`` and ``pte`` groups' schemas, derived from the dataclasses the PTE code runs on."""
from __future__ import annotations

from data_builders.config_fields import derived
from data_builders.metrics.hardware import HardwareProfile
from data_builders.metrics.pte import PTEConfig
from recipes.schema import store


# ``hardware``: a PTE hardware profile; the YAML files are the registry (data_builders/metrics/hardware.py reads them).
HardwareConfig = derived(HardwareProfile, "HardwareConfig", required_help={
    "name": "the profile's name: its file's name",
    "peak_flops": "FLOP/s, FP16/BF16 tensor cores",
    "mem_bandwidth": "bytes/s, device memory (HBM / GDDR)",
    "hoi": "FLOP/byte: peak_flops / mem_bandwidth (as the paper prints it for *_paper profiles)",
    "source": "where each number comes from"})


# ``pte``: how trajectories are priced; the profile is the ``hardware`` group.
PTESettings = derived(PTEConfig, "PTESettings", exclude=("hardware",), module=__name__)


# what this module adds to Hydra's ConfigStore, (group or None for an entry config, name, schema)
SCHEMAS = [
    ("hardware", "schema", HardwareConfig),
    ("pte", "schema", PTESettings),
]
store(SCHEMAS)
