"""Hardware profiles for PTE's γ: peak tensor FLOP/s, memory bandwidth, and their ratio HOI (FLOP/byte).

PTE (arXiv 2604.05404) prices a decode step's KV-cache traffic in prefill tokens through
γ = 2·n_layers·d_model·HOI / N_params, so γ — and every PTE figure — scales linearly with the hardware's
operational intensity HOI = peak FLOP/s ÷ memory bandwidth (the roofline ridge point). Two families ship:

* ``*_paper`` — the five profiles of the paper's Tables 2/4, with the HOI it prints. They mix conventions:
  H100, H200 and A100 use the 2:4-*sparsity* tensor peaks, V100 (no sparsity support) its dense peak, and
  the RTX 4090's 330 TFLOPS is its dense FP16-accumulate (or sparse FP32-accumulate) figure. Use
  ``h100_pcie_paper`` (the default) to reproduce the paper's γ values.
* ``*_dense`` — dense FP16/BF16 tensor peaks with FP32 accumulation (what a bf16 matmul in PyTorch/vLLM
  can reach) over datasheet memory bandwidth. These are the physically meaningful ridge points; with them
  γ is 2× smaller than the paper's on the sparse-peak devices, so PTE figures are comparable only under
  one profile — report which.

The profiles are written once, as the ``recipes/hardware/<name>.yaml`` files: the Hydra group that an entry
config pricing PTE selects (``hardware=<name>`` on the command line), and the registry :data:`PROFILES` this
module reads from them for code outside Hydra. Each file names the documents its figures come from (vendor
figures were transcribed from the NVIDIA documents each ``source`` names, not fetched from this environment).
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from omegaconf import OmegaConf

DEFAULT_HARDWARE = "h100_pcie_paper"   # the paper's reference device, so γ matches its Table 3


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    peak_flops: float       # FLOP/s, FP16/BF16 tensor cores
    mem_bandwidth: float    # bytes/s, device memory (HBM / GDDR)
    hoi: float              # FLOP/byte; as printed by the paper for *_paper, else peak_flops / mem_bandwidth
    source: str             # where each number comes from
    sparse: bool = False    # peak_flops is a 2:4 structured-sparsity figure

    def __post_init__(self) -> None:
        for key in ("peak_flops", "mem_bandwidth", "hoi"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"hardware profile {self.name!r}: {key} must be a positive number, got {value!r}")
        # The paper prints HOI to one decimal; anything further off is a typo in a profile, not rounding.
        derived = self.peak_flops / self.mem_bandwidth
        if abs(self.hoi - derived) > 1e-3 * derived:
            raise ValueError(f"hardware profile {self.name!r}: hoi {self.hoi} does not match "
                             f"peak_flops / mem_bandwidth = {derived:.2f}")
        if not self.source.strip():
            raise ValueError(f"hardware profile {self.name!r} needs a source")


def get_profile(spec: str | HardwareProfile | Mapping[str, Any]) -> HardwareProfile:
    """A profile from its registry name, a profile, or a mapping with the profile's fields (a composed
    ``hardware`` Hydra node or a plain dict)."""
    if isinstance(spec, HardwareProfile):
        return spec
    if isinstance(spec, str):
        if spec not in PROFILES:
            raise KeyError(f"unknown hardware profile {spec!r}; known: {', '.join(sorted(PROFILES))}")
        return PROFILES[spec]
    if hasattr(spec, "items"):     # dict or omegaconf DictConfig
        fields = {k: spec[k] for k in spec}
        missing = {"name", "peak_flops", "mem_bandwidth", "hoi", "source"} - set(fields)
        unknown = set(fields) - set(HardwareProfile.__dataclass_fields__)
        if missing or unknown:
            raise ValueError(f"hardware profile mapping: missing {sorted(missing)}, unknown {sorted(unknown)}")
        return HardwareProfile(**{k: (float(v) if k in ("peak_flops", "mem_bandwidth", "hoi") else v)
                                  for k, v in fields.items()})
    raise TypeError(f"a hardware profile is a name, a HardwareProfile or a mapping, not {type(spec).__name__}")


def hardware_dir() -> Path:
    """``recipes/hardware/``, found without importing ``recipes``: that package registers its schemas on import,
    and they import this module."""
    spec = importlib.util.find_spec("recipes")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the recipes package (toolwise's Hydra config root) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "hardware"


def load_profiles(directory: str | Path) -> dict[str, HardwareProfile]:
    """Every ``<name>.yaml`` profile in ``directory``, by name; a file that is not a valid profile is an error
    naming it."""
    profiles = {}
    for path in sorted(Path(directory).glob("*.yaml")):
        node = OmegaConf.to_container(OmegaConf.load(path))
        node.pop("defaults", None)   # the Hydra defaults list (the group's schema), not a profile field
        try:
            profile = get_profile(node)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}: {e}") from None
        if profile.name != path.stem:
            raise ValueError(f"{path}: name {profile.name!r} must be the file's name (hardware={path.stem} selects it)")
        profiles[profile.name] = profile
    if DEFAULT_HARDWARE not in profiles:
        raise FileNotFoundError(f"{directory}: no {DEFAULT_HARDWARE}.yaml (the default hardware profile)")
    return profiles


PROFILES: Mapping[str, HardwareProfile] = MappingProxyType(load_profiles(hardware_dir()))
