"""Hardware profiles for PTE's γ: peak tensor FLOP/s, memory bandwidth, and their ratio HOI (FLOP/byte).

PTE (seed 003, arXiv 2604.05404) prices a decode step's KV-cache traffic in prefill tokens through
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

Vendor figures were transcribed from the NVIDIA documents each ``source`` names (not fetched from this
environment); the RTX 4090 ones were cross-checked against third-party spec tables, and a figure whose last
digit is uncertain says so in its source.

The numbers here and in ``recipes/hardware/<name>.yaml`` (the Hydra group, ``+hardware=<name>``) are the
same; tests/trainers/test_pte.py checks that they stay so.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

TERA = 1e12

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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rate(per_second: float, unit: float = TERA) -> float:
    # Whole FLOP/s and bytes/s: 2.039 * 1e12 is 2039000000000.0002 in binary floating point.
    return float(round(per_second * unit))


def _dense(name: str, tflops: float, tb_s: float, source: str) -> HardwareProfile:
    peak, bandwidth = _rate(tflops), _rate(tb_s)
    return HardwareProfile(name, peak, bandwidth, peak / bandwidth, source, sparse=False)


_H100_DS = "NVIDIA H100 Tensor Core GPU Datasheet"
_H100_WP = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (Hopper)"
_H200_DS = "NVIDIA H200 Tensor Core GPU Datasheet"
_A100_DS = "NVIDIA A100 Tensor Core GPU Datasheet"
_ADA_WP = "NVIDIA Ada GPU Architecture whitepaper (GeForce RTX 4090 column of its appendix spec table)"
_V100_DS = "NVIDIA Tesla V100 GPU Accelerator Datasheet / Volta architecture whitepaper"
_PAPER = "Su et al., 'Beyond Accuracy: Unveiling Inefficiency Patterns in Tool-Integrated Reasoning', " \
         "arXiv 2604.05404v2, Table 2 and Appendix A.2/A.3 Table 4"

PROFILES: dict[str, HardwareProfile] = {p.name: p for p in [
    # ------------------------------------------------------------------ the paper's own profiles
    HardwareProfile(
        "h100_pcie_paper", _rate(1513), _rate(2.0), 756.5,
        f"{_PAPER}: H100 80GB PCIe, 1,513 TFLOPS FP16/BF16 over 2.0 TB/s = 756.5 (paper's reference device). "
        f"1,513 is the {_H100_DS} PCIe figure *with sparsity*; dense is half (see h100_pcie_dense).",
        sparse=True),
    HardwareProfile(
        "h200_nvl_paper", _rate(1671), _rate(4.8), 348.1,
        f"{_PAPER}: H200, HOI 348.1. Table 4 prints 1,617 TFLOPS, but 1,617/4.8 = 336.9; 348.1 = 1,671/4.8, "
        f"the {_H200_DS} H200 NVL FP16/BF16 figure *with sparsity* (H200 SXM: 1,979), 4.8 TB/s. "
        f"We keep the printed HOI and the 1,671 that produces it.",
        sparse=True),
    HardwareProfile(
        "a100_pcie_paper", _rate(624), _rate(1.935), 322.5,
        f"{_PAPER}: A100, 624 TFLOPS, HOI 322.5. Table 4 prints 1.93 TB/s (624/1.93 = 323.3); 322.5 = "
        f"624/1.935, the {_A100_DS} A100 80GB PCIe bandwidth (1,935 GB/s). 624 is BF16/FP16 *with sparsity*.",
        sparse=True),
    HardwareProfile(
        "rtx4090_paper", _rate(330), _rate(1.008), 327.4,
        f"{_PAPER}: RTX 4090, 330 TFLOPS, HOI 327.4. Table 4 prints 1.00 TB/s (330/1.00 = 330); 327.4 = "
        f"330/1.008, the 1,008 GB/s of the {_ADA_WP}. 330 (330.3 there) is the dense FP16-accumulate "
        f"(equivalently sparse FP32-accumulate) tensor peak; dense BF16/FP32-accumulate is 165.2.",
        sparse=False),
    HardwareProfile(
        "v100_sxm2_paper", _rate(125), _rate(0.9), 138.9,
        f"{_PAPER}: V100, 125 TFLOPS over 0.90 TB/s = 138.9. {_V100_DS}: V100 SXM2 tensor performance "
        f"125 TFLOPS (dense; Volta has no sparsity), 900 GB/s. Dense, unlike the paper's H100/H200/A100.",
        sparse=False),
    # ------------------------------------------------------------------ dense vendor peaks
    _dense("h100_sxm_dense", 989.4, 3.35,
           f"{_H100_WP}: H100 SXM5 peak BF16/FP16 tensor with FP32 accumulate 989.4 TFLOPS dense "
           f"(1,978.9 with sparsity; {_H100_DS}: 1,979 with sparsity); {_H100_DS}: 3.35 TB/s."),
    _dense("h100_pcie_dense", 756.5, 2.0,
           f"{_H100_DS} (editions with an H100 PCIe column; later ones list H100 NVL): BF16/FP16 tensor "
           f"1,513 TFLOPS with sparsity, halved for dense (756.5; the "
           f"whitepaper's H100 PCIe column lists ~756 — digit after the decimal point not verified); "
           f"H100 80GB PCIe memory bandwidth 2.0 TB/s (HBM2e)."),
    _dense("h200_sxm_dense", 989.4, 4.8,
           f"{_H200_DS}: H200 SXM BF16/FP16 tensor 1,979 TFLOPS with sparsity, halved for dense (989.4, the "
           f"same GH100 SXM configuration as {_H100_WP}); 4.8 TB/s HBM3e."),
    _dense("h200_nvl_dense", 835.5, 4.8,
           f"{_H200_DS}: H200 NVL BF16/FP16 tensor 1,671 TFLOPS with sparsity, halved for dense (835.5); "
           f"4.8 TB/s. Dense counterpart of h200_nvl_paper."),
    _dense("a100_sxm_dense", 312, 2.039,
           f"{_A100_DS}: BF16/FP16 tensor 312 TFLOPS dense (624 with sparsity); A100 80GB SXM 2,039 GB/s."),
    _dense("a100_pcie_dense", 312, 1.935,
           f"{_A100_DS}: BF16/FP16 tensor 312 TFLOPS dense; A100 80GB PCIe 1,935 GB/s. "
           f"Dense counterpart of a100_pcie_paper."),
    _dense("rtx4090_dense", 165.2, 1.008,
           f"{_ADA_WP}: GeForce RTX 4090 peak FP16 and BF16 tensor with FP32 accumulate 165.2 TFLOPS dense "
           f"(330.3 with sparsity or with FP16 accumulate); 1,008 GB/s (21 Gbps GDDR6X, 384-bit)."),
    _dense("v100_sxm2_dense", 125, 0.9,
           f"{_V100_DS}: V100 SXM2 tensor performance 125 TFLOPS (FP16 in, FP32 accumulate; no sparsity), "
           f"900 GB/s HBM2. Identical to v100_sxm2_paper."),
]}


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
