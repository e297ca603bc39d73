"""One device as data: what it computes and moves per second, and how close to its peaks a kernel gets.

A kernel is priced by the roofline: the larger of its compute time and its
memory time, plus a fixed cost per kernel (launch and tail):

- a **matmul** of ``F`` FLOPs moving ``B`` bytes takes ``max(F / (peak ·
  η(F)), B / (hbm · η_hbm)) + kernel``, with the size-dependent efficiency
  ``η(F) = mfu · F / (F + F½)``: large matmuls reach ``mfu`` of the peak,
  one of ``F½`` FLOPs half of that, and skinny ones (few FLOPs per byte) are
  memory-bound;
- a **memory-bound** kernel (norms, softmax, dropout, residual adds, the
  optimizer step) moving ``B`` bytes takes ``B / (hbm · η_hbm) + kernel``.

``peak`` is the datasheet's dense peak in the kernel's dtype and ``hbm`` the
datasheet's memory bandwidth; ``mfu``, ``F½``, ``η_hbm`` and ``kernel`` are
the physical parameters a preset calibrates (its file in ``sappkit/hardware/presets/``
says on which published runs). An FP8 matmul (``fp8``, per-tensor scaled, or
``mxfp8``, block scaled) runs at the FP8 peak with its own ``fp8_mfu`` and
``fp8_matmul_half_gflop`` (default the 16-bit ones): FP8 tensor cores reach a
smaller share of their doubled peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .._check import check_number
from ..errors import InputError
from .tables import read

__all__ = ["DeviceConfig", "DTYPES", "RESERVED_MIB"]

#: The dtypes a device gives a peak for: the 16-bit ones (``tflops``), fp32, fp8 (per-tensor scaled) and mxfp8
#: (block scaled, ``mxfp8_tflops``).
DTYPES = ("bf16", "fp16", "fp32", "fp8", "mxfp8")
#: The default reserve, MiB: a CUDA 12 context with its kernel modules takes about 0.5 GiB on a Hopper card, NCCL's
#: communicators (one per process group, ``NCCL_BUFFSIZE`` 4 MiB per channel and peer) and cuBLAS/cuDNN workspaces
#: a few hundred MiB more, and the caching allocator leaves some of what it reserves unused. 2 GiB in all: an
#: assumption (no source measures the sum for a training run), overridable per device.
RESERVED_MIB = 2048.0
#: The named attention kernels' efficiency fields, forward and backward.
_ATTENTION_FIELDS = ("fa2_forward", "fa2_backward", "fa3_forward", "fa3_backward", "cudnn_forward", "cudnn_backward")


@dataclass(frozen=True, kw_only=True)
class DeviceConfig:
    """What one device computes and moves per second, and how close to its peaks its kernels get.

    The defaults describe a generic 300 TFLOP/s device whose matmuls reach a
    flat 40% of its peak; the presets (:data:`sappkit.hardware.DEVICE_PRESETS`) give
    real devices with sourced peaks and calibrated efficiencies.

    Examples
    --------
    >>> gpu = DeviceConfig(tflops=400.0, mfu=0.8, hbm_gbs=2000.0, matmul_half_gflop=1.0)
    >>> round(gpu.matmul_efficiency(1e9), 3), round(gpu.matmul_efficiency(1e12), 3)
    (0.4, 0.799)
    >>> gpu.memory_ms(2e9)  # 2 GB at 2000 GB/s
    1.0
    """

    tflops: float = 300.0
    """Peak dense TFLOP/s in bf16 and fp16 (Ascend 910B-class ~300, H100 ~990)."""
    mfu: float = 0.4
    """Fraction of the peak large matmuls reach, in (0, 1] (smaller ones reach less: ``matmul_half_gflop``)."""
    link_gbs: float = 50.0
    """Bandwidth to the device's neighbours, GB/s (1e9 bytes) per direction: the tensor-parallel link when no
    :class:`~sappkit.hardware.Cluster` is given."""
    hbm_gbs: float = 1600.0
    """Device memory bandwidth, GB/s (1e9 bytes), for memory-bound kernels."""
    name: str = "custom"
    """The preset's name (``"a100-80g"``) or ``"custom"``."""
    hbm_gb: float = 64.0
    """Device memory, GB (1e9 bytes)."""
    fp32_tflops: float | None = None
    """Peak dense fp32 TFLOP/s (matmuls of fp32 training); None: ``tflops / 2``."""
    fp8_tflops: float | None = None
    """Peak dense fp8 TFLOP/s; None: the device has no fp8 matmuls (``tflops``)."""
    matmul_half_gflop: float = 0.0
    """Matmul size (GFLOP) at which a matmul reaches half of ``mfu``; 0: every size reaches ``mfu``."""
    hbm_efficiency: float = 1.0
    """Fraction of ``hbm_gbs`` a memory-bound kernel reaches, in (0, 1]."""
    kernel_us: float = 0.0
    """Fixed cost of every kernel (launch, tail), µs."""
    FILE_KIND: ClassVar[str] = "device"
    """What a hardware file of a device says in its ``kind`` (:mod:`sappkit.hardware.tables`)."""
    memory_mib: float | None = None
    """Device memory as the card reports it (``nvidia-smi``'s ``memory.total``), MiB; None: ``hbm_gb`` bytes.
    The presets cite each card's report (an "80 GB" H100 reports 81,559 MiB)."""
    comm_sm_share: float = 0.12
    """Share of the device's SMs a collective's kernels take while they overlap compute, in [0, 1): the compute
    under an overlapped collective runs that much slower (:func:`sappkit.hardware.overlap_ms`). Default: Transformer
    Engine's 16 SMs per overlapped collective (``initialize_ub``'s ``add_ub(num_sm=16)``) of an H100's 132."""
    reserved_mib: float = RESERVED_MIB
    """Memory a training process cannot give to tensors, MiB: the CUDA context, the communication library's
    buffers and workspaces, and the caching allocator's fragmentation (:data:`RESERVED_MIB`)."""
    expert_half_tokens: float = 0.0
    """Tokens per expert at which a 16-bit expert GEMM (grouped or one per expert) reaches half the efficiency a
    dense GEMM of its FLOPs reaches: ``η · M / (M + M½)`` for ``M`` tokens per expert (a fixed time per expert
    GEMM: its fill and drain, and the part-empty tiles and last wave of few rows); 0: no such loss. Other dtypes
    scale it by their rate (:meth:`expert_tokens_half`)."""
    fp8_mfu: float | None = None
    """Fraction of the FP8 peak large FP8 matmuls reach, in (0, 1]; None: ``mfu``."""
    fp8_matmul_half_gflop: float | None = None
    """FP8 matmul size (GFLOP) at which an FP8 matmul reaches half of ``fp8_mfu``; None: ``matmul_half_gflop``."""
    mxfp8_tflops: float | None = None
    """Peak dense TFLOP/s of block-scaled FP8 (MXFP8: one E8M0 scale per 32 elements, applied by the tensor cores,
    as Blackwell's are); None: the device has no such tensor cores and refuses the ``mxfp8`` recipe."""
    fa2_forward: float | None = None
    """Fraction of the peak FlashAttention-2's forward reaches on the device, in (0, 1]; None: the matmul
    efficiency of its size (``flash``). The presets cite the kernel papers' measurements."""
    fa2_backward: float | None = None
    """Fraction of the peak FlashAttention-2's backward reaches (its FLOPs counted as 2.5 forwards); None: as
    ``fa2_forward``'s None."""
    fa3_forward: float | None = None
    """FlashAttention-3's forward, as ``fa2_forward``."""
    fa3_backward: float | None = None
    """FlashAttention-3's backward, as ``fa2_backward``."""
    cudnn_forward: float | None = None
    """cuDNN's fused attention forward (Transformer Engine's ``FusedAttention``), as ``fa2_forward``."""
    cudnn_backward: float | None = None
    """cuDNN's fused attention backward, as ``fa2_backward``."""

    def __post_init__(self):
        for field in ("tflops", "link_gbs", "hbm_gbs", "hbm_gb"):
            check_number(field, getattr(self, field), minimum=0, strict=True)
        for field in ("fp32_tflops", "fp8_tflops", "mxfp8_tflops"):
            if getattr(self, field) is not None:
                check_number(field, getattr(self, field), minimum=0, strict=True)
        for field in ("mfu", "hbm_efficiency", "fp8_mfu", *_ATTENTION_FIELDS):
            if field in ("fp8_mfu", *_ATTENTION_FIELDS) and getattr(self, field) is None:
                continue
            if not 0 < check_number(field, getattr(self, field)) <= 1:
                raise InputError(f"{field} must be in (0, 1]; got {getattr(self, field)!r}")
        check_number("matmul_half_gflop", self.matmul_half_gflop, minimum=0)
        if self.fp8_matmul_half_gflop is not None:
            check_number("fp8_matmul_half_gflop", self.fp8_matmul_half_gflop, minimum=0)
        check_number("kernel_us", self.kernel_us, minimum=0)
        check_number("expert_half_tokens", self.expert_half_tokens, minimum=0)
        if not 0 <= check_number("comm_sm_share", self.comm_sm_share) < 1:
            raise InputError(f"comm_sm_share must be in [0, 1); got {self.comm_sm_share!r}")
        if self.memory_mib is not None:
            check_number("memory_mib", self.memory_mib, minimum=0, strict=True)
        if check_number("reserved_mib", self.reserved_mib, minimum=0) >= self.total_mb:
            raise InputError(f"reserved_mib must be less than the device's {self.total_mb:,.0f} MiB; got "
                             f"{self.reserved_mib!r}")
        if not (isinstance(self.name, str) and self.name):
            raise InputError(f"name must be a non-empty string; got {self.name!r}")

    @classmethod
    def preset(cls, name, /, **overrides) -> DeviceConfig:
        """A device preset by name (:data:`sappkit.hardware.DEVICE_PRESETS`) or a hardware file (``.toml``,
        :mod:`sappkit.hardware.tables`), any field overridden.

        Examples
        --------
        >>> gpu = DeviceConfig.preset("h100-sxm")
        >>> gpu.tflops, gpu.hbm_gb, DeviceConfig.preset("h100-sxm", hbm_gb=94.0).hbm_gb
        (989.4, 80.0, 94.0)
        """
        return read(cls, name, overrides)

    @property
    def total_mb(self) -> float:
        """The device's memory, MiB: ``memory_mib`` as the card reports it, else ``hbm_gb`` (1e9 bytes) in MiB."""
        return self.hbm_gb * 1e9 / 2**20 if self.memory_mib is None else float(self.memory_mib)

    @property
    def usable_mb(self) -> float:
        """What a training process can hold in tensors, MiB: :attr:`total_mb` less ``reserved_mib``.

        Examples
        --------
        >>> DeviceConfig.preset("h100-sxm").usable_mb  # 81,559 MiB reported, 2,048 reserved
        79511.0
        """
        return self.total_mb - self.reserved_mib

    def peak_tflops(self, dtype: str = "bf16") -> float:
        """The dense peak in ``dtype`` (one of :data:`DTYPES`), TFLOP/s."""
        if dtype in ("bf16", "fp16"):
            return self.tflops
        if dtype == "fp32":
            return self.tflops / 2 if self.fp32_tflops is None else self.fp32_tflops
        if dtype == "fp8":
            return self.tflops if self.fp8_tflops is None else self.fp8_tflops
        if dtype == "mxfp8":
            if self.mxfp8_tflops is None:
                raise InputError(f"device {self.name!r} has no block-scaled FP8 tensor cores (mxfp8_tflops is None): "
                                 "the mxfp8 recipe needs a Blackwell-class device")
            return self.mxfp8_tflops
        raise InputError(f"dtype must be one of {', '.join(map(repr, DTYPES))}; got {dtype!r}")

    def matmul_efficiency(self, flops: float, dtype: str = "bf16") -> float:
        """The fraction of the peak a matmul of ``flops`` FLOPs in ``dtype`` reaches (before the memory roofline).

        Examples
        --------
        >>> gpu = DeviceConfig(mfu=0.8, matmul_half_gflop=1.0, fp8_mfu=0.5, fp8_matmul_half_gflop=3.0)
        >>> gpu.matmul_efficiency(1e9), gpu.matmul_efficiency(1e9, "fp8"), gpu.matmul_efficiency(3e9, "mxfp8")
        (0.4, 0.125, 0.25)
        """
        mfu, half = self._mfu_and_half(dtype)
        return mfu * flops / (flops + half) if half else mfu

    def _mfu_and_half(self, dtype: str) -> tuple[float, float]:
        """``dtype``'s share of its peak that large matmuls reach, and its half-size in FLOPs."""
        mfu, half = self.mfu, self.matmul_half_gflop * 1e9
        if dtype in ("fp8", "mxfp8"):
            mfu = mfu if self.fp8_mfu is None else self.fp8_mfu
            half = half if self.fp8_matmul_half_gflop is None else self.fp8_matmul_half_gflop * 1e9
        return mfu, half

    def expert_tokens_half(self, dtype: str = "bf16") -> float:
        """The tokens per expert at which an expert GEMM in ``dtype`` reaches half its efficiency:
        ``expert_half_tokens`` (stated for 16-bit GEMMs) times ``dtype``'s large-matmul rate over the 16-bit one.

        The loss is a fixed time per expert GEMM (its fill, drain and part-empty last wave), so a faster rate
        computes more tokens in it: FP8's half-point is larger, as FP8's dense half-size is tied to the 16-bit
        one (``docs/pricing.md``, "FP8").

        Examples
        --------
        >>> gpu = DeviceConfig(tflops=1000.0, fp8_tflops=2000.0, mfu=0.6, fp8_mfu=0.45, expert_half_tokens=800.0)
        >>> gpu.expert_tokens_half("bf16"), gpu.expert_tokens_half("fp8")
        (800.0, 1200.0)
        """
        rate = self.peak_tflops(dtype) * self._mfu_and_half(dtype)[0]
        return self.expert_half_tokens * rate / (self.tflops * self.mfu)

    def matmul_ms(self, flops: float, nbytes: float, dtype: str = "bf16", *, size: float | None = None,
                  tokens: float | None = None) -> float:
        """One matmul kernel's time, ms: the compute or memory roofline, whichever is longer, plus the kernel cost.

        ``size`` is the FLOPs of one problem of a batched or grouped matmul (its efficiency is that size's);
        default ``flops``. ``tokens``: an expert GEMM's tokens per expert (``expert_half_tokens``); None: a dense
        GEMM.
        """
        if flops <= 0:
            return 0.0
        efficiency = self.matmul_efficiency(flops if size is None else size, dtype)
        if tokens is not None and self.expert_half_tokens:
            efficiency *= tokens / (tokens + self.expert_tokens_half(dtype))
        compute = flops / (self.peak_tflops(dtype) * 1e9 * efficiency)
        return max(compute, self.memory_ms(nbytes, kernel=False)) + self.kernel_us * 1e-3

    def attention_efficiency(self, kernel: str, backward: bool = False) -> float | None:
        """The fraction of the peak the fused attention ``kernel`` (``fa2``, ``fa3``, ``cudnn``) reaches forward
        or backward on this device; None for ``flash`` and where the device states none (priced as a matmul)."""
        field = f"{kernel}_{'backward' if backward else 'forward'}"
        return getattr(self, field) if field in _ATTENTION_FIELDS else None

    def attention_ms(self, kernel: str, backward: bool, flops: float, nbytes: float, dtype: str = "bf16") -> float:
        """One fused attention kernel's time, ms: at :meth:`attention_efficiency` of the peak where the device
        states it (or the memory roofline, whichever is longer, plus the kernel cost), else :meth:`matmul_ms`.

        Examples
        --------
        >>> h100 = DeviceConfig.preset("h100-sxm")
        >>> round(h100.attention_ms("fa2", False, 1e12, 0.0) / h100.attention_ms("fa3", False, 1e12, 0.0), 2)
        1.74
        """
        efficiency = self.attention_efficiency(kernel, backward)
        if efficiency is None:
            return self.matmul_ms(flops, nbytes, dtype)
        if flops <= 0:
            return 0.0
        compute = flops / (self.peak_tflops(dtype) * 1e9 * efficiency)
        return max(compute, self.memory_ms(nbytes, kernel=False)) + self.kernel_us * 1e-3

    def memory_ms(self, nbytes: float, *, kernel: bool = True) -> float:
        """A memory-bound kernel's time, ms: ``nbytes`` read and written at the reachable bandwidth."""
        if nbytes <= 0:
            return 0.0
        return nbytes / (self.hbm_gbs * 1e6 * self.hbm_efficiency) + (self.kernel_us * 1e-3 if kernel else 0.0)
