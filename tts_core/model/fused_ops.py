"""Triton kernels for the launch-bound parts of a CUDA frame step (docs/PERFORMANCE.md).

A codebook's pick and the local attention become one kernel each; the global decode attention is
split over chunks of keys, then combined. Same math as the plain ops, other rounding: every CUDA
path (eager, compiled, graphed) runs these, so they agree bit for bit, and each row is computed
alone (batch invariant); the CPU keeps the plain ops. Off where Triton is missing or cannot build
for the GPU (`check_device`); tests run them in Triton's interpreter (TRITON_INTERPRET=1).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Iterator

import torch

from ..env import env_str


def _import_triton():
    """Triton, where its kernels can run: a CUDA (or ROCm) build of torch, or Triton's interpreter
    asked for (TRITON_INTERPRET). A CPU build never imports it (the import delays a CPU start)."""
    if torch.version.cuda is None and torch.version.hip is None and not env_str("TRITON_INTERPRET"):
        return None, None
    try:  # Triton ships with CUDA builds of torch; a CPU install may lack it
        import triton
        import triton.language as tl
    except ImportError:  # pragma: no cover - depends on the install
        return None, None
    return triton, tl


triton, tl = _import_triton()

logger = logging.getLogger(__name__)

# Triton builds for Volta (7.0) and newer NVIDIA GPUs.
MIN_CAPABILITY = (7, 0)

_disabled: str | None = None  # why the kernels were turned off for this process (see `disable`)
_tracing_plain = threading.local()  # `plain_ops()` in force on this thread
_held: set[torch.device] = set()  # devices whose kernels are still being built (see `hold`)
_building = threading.local()  # `building()` in force on this thread


def fused_enabled(device: torch.device) -> bool:
    """The fused kernels serve this device: CUDA with Triton present, unless they were turned off for
    this process (`disable`), this thread is inside `plain_ops()`, or they are held back on this
    device while they build (`hold`; the building thread itself uses them)."""
    return (triton is not None and _disabled is None and device.type == "cuda"
            and not getattr(_tracing_plain, "active", False)
            and (not _held or _device_key(device) not in _held or getattr(_building, "active", False)))


def planned(device: torch.device) -> bool:
    """The kernels serve `device` once built: `fused_enabled` without the hold (what /health lists)."""
    return triton is not None and _disabled is None and device.type == "cuda"


def _device_key(device: torch.device) -> torch.device:
    if device.index is not None:
        return device
    return torch.device(device.type, torch.cuda.current_device() if torch.cuda.is_available() else 0)


def hold(device: torch.device) -> None:
    """The plain ops serve `device` until `release`, except on a thread inside `building()`: a
    deferred start serves at once while another thread builds the kernels (Triton compiling every
    variant takes seconds with an empty cache). Two runners on one device share the hold."""
    _held.add(_device_key(device))


def release(device: torch.device) -> None:
    _held.discard(_device_key(device))


@contextlib.contextmanager
def _flag_on(flag: threading.local) -> Iterator[None]:
    """`flag.active` set on this thread while inside; what it was before, after."""
    before = getattr(flag, "active", False)
    flag.active = True
    try:
        yield
    finally:
        flag.active = before


def building() -> contextlib.AbstractContextManager[None]:
    """The kernels on this thread while inside, held or not (the thread that builds them)."""
    return _flag_on(_building)


def plain_ops() -> contextlib.AbstractContextManager[None]:
    """The plain ops on this thread while inside: for `torch.export`, which cannot trace a raw
    Triton launch (AOTInductor then generates its own kernels for the same math)."""
    return _flag_on(_tracing_plain)


def disable(reason: str) -> None:
    """Turn the kernels off for this process: every path then runs the plain ops (same math).
    Call before anything is compiled or captured (the choice is read while tracing)."""
    global _disabled
    if _disabled is None:
        logger.warning("fused GPU kernels off: %s; the plain ops run instead", reason)
    _disabled = reason


def disabled_reason() -> str | None:
    return _disabled


def check_device(device: torch.device) -> bool:
    """At start-up, outside any tracing: turn the kernels off on a GPU Triton cannot build for.
    Returns whether they serve `device`."""
    if fused_enabled(device):
        capability = torch.cuda.get_device_capability(device)
        if capability < MIN_CAPABILITY:
            disable(f"compute capability {capability[0]}.{capability[1]} is below the "
                    f"{MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} Triton needs")
    return fused_enabled(device)


def available() -> bool:
    """The kernels can run at all here (a GPU, or the interpreter on CPU tensors)."""
    return triton is not None


if triton is not None:

    @triton.jit
    def _orderable(bits):
        """int32 bit patterns of float32 -> ints that sort as the floats do (and back: an involution)."""
        return bits ^ ((bits >> 31) & 0x7FFFFFFF)

    @triton.jit
    def _pick_kernel(logits_ptr, logits_stride, seen_ptr, seen_stride, u_ptr, u_stride,
                     do_ptr, do_stride, temp_ptr, temp_stride, kth_ptr, kth_stride, topp_ptr, topp_stride,
                     pen_ptr, pen_stride, out_ptr, V, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        valid = offs < V
        x = tl.load(logits_ptr + row * logits_stride + offs, mask=valid, other=0.0).to(tl.float32)
        seen = tl.load(seen_ptr + row * seen_stride + offs, mask=valid, other=0).to(tl.int32)
        rp = tl.load(pen_ptr + row * pen_stride)
        # Correctly rounded division (Triton's default is approximate), as torch divides.
        x = tl.where(seen != 0, tl.where(x < 0, x * rp, tl.math.div_rn(x, rp + tl.zeros_like(x))), x)
        x = tl.where(valid, x, float("-inf"))
        greedy = tl.argmax(x, 0, tie_break_left=True)

        # Sort once, descending by value then ascending by id: both live in one int64 key.
        scores = tl.math.div_rn(x, tl.load(temp_ptr + row * temp_stride) + tl.zeros_like(x))
        key = _orderable(scores.to(tl.int32, bitcast=True)).to(tl.int64)
        packed = tl.sort((key << 32) | (BLOCK - 1 - offs).to(tl.int64), descending=True)
        ids = BLOCK - 1 - (packed & 0xFFFFFFFF).to(tl.int32)
        values = _orderable((packed >> 32).to(tl.int32)).to(tl.float32, bitcast=True)

        kth = tl.minimum(tl.load(kth_ptr + row * kth_stride), V - 1).to(tl.int32)
        threshold = tl.sum(tl.where(offs == kth, values, 0.0), 0)
        in_top_k = valid & (values >= threshold)  # a prefix of the order
        weights = tl.where(in_top_k, tl.exp(values - tl.max(values, 0)), 0.0)
        cdf = tl.cumsum(weights / tl.sum(weights, 0), 0)
        # top-p keeps entry 0 and every entry i >= 1 whose cdf[i - 1] <= p.
        top_p = tl.load(topp_ptr + row * topp_stride)
        num_p = tl.sum(((offs < V - 1) & (cdf <= top_p)).to(tl.int32), 0) + 1
        num_kept = tl.minimum(tl.sum(in_top_k.to(tl.int32), 0), num_p)
        total = tl.sum(tl.where(offs == num_kept - 1, cdf, 0.0), 0)
        target = tl.load(u_ptr + row * u_stride) * total
        position = tl.minimum(tl.sum((valid & (cdf < target)).to(tl.int32), 0), num_kept - 1)
        drawn = tl.sum(tl.where(offs == position, ids, 0), 0)
        sample = tl.load(do_ptr + row * do_stride).to(tl.int32) != 0
        tl.store(out_ptr + row, tl.where(sample, drawn, greedy.to(tl.int32)).to(tl.int64))

    @triton.jit
    def _local_attention_kernel(q_ptr, k_ptr, v_ptr, keys_ptr, values_ptr, out_ptr, index_ptr,
                                q_sb, q_sh, k_sb, k_sh, v_sb, v_sh, c_sb, c_sh, c_sp, o_sb, o_sh, scale,
                                NH: tl.constexpr, D: tl.constexpr, BLOCK_P: tl.constexpr):
        pid = tl.program_id(0)
        b = pid // NH
        h = pid % NH
        d = tl.arange(0, D)
        p = tl.arange(0, BLOCK_P)
        index = tl.load(index_ptr)
        q = tl.load(q_ptr + b * q_sb + h * q_sh + d).to(tl.float32)
        k_new = tl.load(k_ptr + b * k_sb + h * k_sh + d)
        v_new = tl.load(v_ptr + b * v_sb + h * v_sh + d)
        cache = b * c_sb + h * c_sh
        # Earlier positions from the cache; this one from registers (no read-after-write in the cache).
        past = (p < index)[:, None]
        keys = tl.load(keys_ptr + cache + p[:, None] * c_sp + d[None, :], mask=past, other=0.0).to(tl.float32)
        vals = tl.load(values_ptr + cache + p[:, None] * c_sp + d[None, :], mask=past, other=0.0).to(tl.float32)
        is_new = (p == index)[:, None]
        keys = tl.where(is_new, k_new.to(tl.float32)[None, :], keys)
        vals = tl.where(is_new, v_new.to(tl.float32)[None, :], vals)
        s = tl.where(p <= index, tl.sum(keys * q[None, :], 1) * scale, float("-inf"))
        w = tl.exp(s - tl.max(s, 0))
        out = tl.sum(w[:, None] * vals, 0) / tl.sum(w, 0)
        tl.store(out_ptr + b * o_sb + h * o_sh + d, out.to(out_ptr.dtype.element_ty))
        tl.store(keys_ptr + cache + index * c_sp + d, k_new)
        tl.store(values_ptr + cache + index * c_sp + d, v_new)


    @triton.jit
    def _decode_partial_kernel(q_ptr, k_ptr, v_ptr, keys_ptr, values_ptr, mask_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr,
                               q_sb, q_sh, k_sb, k_sh, v_sb, v_sh, c_sb, c_sh, c_sp, mask_sb, length, scale,
                               NH: tl.constexpr, D: tl.constexpr, CHUNK: tl.constexpr, SPLITS: tl.constexpr):
        bh = tl.program_id(0)
        split = tl.program_id(1)
        b = bh // NH
        h = bh % NH
        d = tl.arange(0, D)
        cols = split * CHUNK + tl.arange(0, CHUNK)
        write = tl.load(pos_ptr + b)
        q = tl.load(q_ptr + b * q_sb + h * q_sh + d).to(tl.float32)
        k_new = tl.load(k_ptr + b * k_sb + h * k_sh + d)
        v_new = tl.load(v_ptr + b * v_sb + h * v_sh + d)
        cache = b * c_sb + h * c_sh
        in_range = cols < length
        mask = tl.load(mask_ptr + b * mask_sb + cols, mask=in_range, other=float("-inf")).to(tl.float32)
        # Keys the mask hides are never read: rows shorter than the length bucket cost what they use.
        used = (in_range & (mask > float("-inf")))[:, None]
        keys = tl.load(keys_ptr + cache + cols[:, None] * c_sp + d[None, :], mask=used, other=0.0)
        vals = tl.load(values_ptr + cache + cols[:, None] * c_sp + d[None, :], mask=used, other=0.0)
        # The new key/value from registers: the cache write below may not be visible to this program.
        is_new = (cols == write)[:, None]
        keys = tl.where(is_new, k_new.to(tl.float32)[None, :], keys.to(tl.float32))
        vals = tl.where(is_new, v_new.to(tl.float32)[None, :], vals.to(tl.float32))
        s = tl.sum(keys * q[None, :], 1) * scale + mask
        m = tl.max(s, 0)
        w = tl.exp(s - tl.where(m == float("-inf"), 0.0, m))  # a chunk wholly hidden adds nothing
        part = bh * SPLITS + split
        tl.store(m_ptr + part, m)
        tl.store(l_ptr + part, tl.sum(w, 0))
        tl.store(acc_ptr + part * D + d, tl.sum(w[:, None] * vals, 0))
        if split == 0:
            tl.store(keys_ptr + cache + write * c_sp + d, k_new)
            tl.store(values_ptr + cache + write * c_sp + d, v_new)

    @triton.jit
    def _decode_combine_kernel(m_ptr, l_ptr, acc_ptr, out_ptr, o_sb, o_sh,
                               NH: tl.constexpr, D: tl.constexpr, SPLITS: tl.constexpr):
        bh = tl.program_id(0)
        parts = bh * SPLITS + tl.arange(0, SPLITS)
        d = tl.arange(0, D)
        m = tl.load(m_ptr + parts)
        weight = tl.where(m == float("-inf"), 0.0, tl.exp(m - tl.max(m, 0)))
        total = tl.sum(tl.load(l_ptr + parts) * weight, 0)
        acc = tl.sum(tl.load(acc_ptr + parts[:, None] * D + d[None, :]) * weight[:, None], 0)
        out = acc / total
        tl.store(out_ptr + (bh // NH) * o_sb + (bh % NH) * o_sh + d, out.to(out_ptr.dtype.element_ty))


def _col(t: torch.Tensor) -> torch.Tensor:
    """A per-row parameter ([B] or [B, 1]) as a [B]-strided tensor Triton can index by row."""
    return t if t.ndim == 1 else t[:, 0]


def pick_code(logits: torch.Tensor, seen: torch.Tensor, uniforms: torch.Tensor, do_sample: torch.Tensor,
              temperature: torch.Tensor, kth_index: torch.Tensor, top_p: torch.Tensor,
              penalty: torch.Tensor) -> torch.Tensor:
    """`sampling.pick_codes` in one kernel: codes [B] (int64) from logits [B, V]. Ties order by
    value, then ascending id; top-k keeps every score equal to the k-th, as the plain path does.
    seen: [B, >= V] bool; uniforms, do_sample, penalty: [B]; temperature, kth_index, top_p: [B] or
    [B, 1] (the `FilterParams` fields). Any row strides; the last dims must be contiguous."""
    batch, vocab = logits.shape
    out = torch.empty(batch, dtype=torch.int64, device=logits.device)
    temperature, kth_index, top_p = _col(temperature), _col(kth_index), _col(top_p)
    _pick_kernel[(batch,)](
        logits, logits.stride(0), seen, seen.stride(0), uniforms, uniforms.stride(0),
        do_sample, do_sample.stride(0), temperature, temperature.stride(0), kth_index, kth_index.stride(0),
        top_p, top_p.stride(0), penalty, penalty.stride(0), out, vocab,
        BLOCK=triton.next_power_of_2(vocab), num_warps=4,
    )
    return out


def _one_query(q: torch.Tensor) -> bool:
    """What both attention kernels need of q [B, nh, S, D]: one query per row, a power-of-two D."""
    dim = q.shape[-1]
    return q.shape[2] == 1 and dim & (dim - 1) == 0


def _last_dim_contiguous(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The kernels index the last dim with stride 1 (q, k, v come as transposed views: they have it)."""
    return tuple(t if t.stride(-1) == 1 else t.contiguous() for t in tensors)


def local_attention_fits(q: torch.Tensor, keys: torch.Tensor) -> bool:
    """The kernel's layout needs: one query, a power-of-two head size, contiguous caches."""
    return _one_query(q) and keys.is_contiguous()


def local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                    index: torch.Tensor) -> torch.Tensor:
    """`kv_cache.attend_local` in one kernel: stores k, v [B, nh, 1, D] at position `index` [1] of
    keys/values [B, nh, P, D] and returns q's attention over positions 0..index, [B, nh, 1, D]."""
    batch, heads, _, dim = q.shape
    q, k, v = _last_dim_contiguous(q, k, v)
    out = torch.empty(batch, heads, 1, dim, dtype=q.dtype, device=q.device)
    _local_attention_kernel[(batch * heads,)](
        q, k, v, keys, values, out, index,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        keys.stride(0), keys.stride(1), keys.stride(2), out.stride(0), out.stride(1), 1.0 / math.sqrt(dim),
        NH=heads, D=dim, BLOCK_P=triton.next_power_of_2(keys.shape[2]), num_warps=1,
    )
    return out


DECODE_CHUNK = 64  # keys per program of the global decode attention


def decode_attention_fits(q: torch.Tensor, keys: torch.Tensor, key_mask: torch.Tensor) -> bool:
    """The kernel's layout needs: one query per row, a power-of-two head size, contiguous key rows,
    an additive mask [B, 1, 1, length] with contiguous columns."""
    return _one_query(q) and keys.stride(-1) == 1 and key_mask.ndim == 4 and key_mask.stride(-1) == 1


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                     write_pos: torch.Tensor, key_mask: torch.Tensor, length: int) -> torch.Tensor:
    """`kv_cache.StaticDecodeAttender.attend` in two kernels (split over chunks of DECODE_CHUNK keys
    so one stream fills the GPU, then combined): stores k, v [B, nh, 1, D] at column `write_pos` [B]
    of keys/values [B, nh, L, D]; returns q's attention over columns [0, length) under `key_mask`."""
    batch, heads, _, dim = q.shape
    q, k, v = _last_dim_contiguous(q, k, v)
    splits = triton.next_power_of_2(-(-length // DECODE_CHUNK))
    parts = batch * heads * splits
    m = torch.empty(parts, dtype=torch.float32, device=q.device)
    total = torch.empty(parts, dtype=torch.float32, device=q.device)
    acc = torch.empty(parts, dim, dtype=torch.float32, device=q.device)
    _decode_partial_kernel[(batch * heads, splits)](
        q, k, v, keys, values, key_mask, write_pos, m, total, acc,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        keys.stride(0), keys.stride(1), keys.stride(2), key_mask.stride(0), length, 1.0 / math.sqrt(dim),
        NH=heads, D=dim, CHUNK=DECODE_CHUNK, SPLITS=splits, num_warps=4,
    )
    out = torch.empty(batch, heads, 1, dim, dtype=q.dtype, device=q.device)
    _decode_combine_kernel[(batch * heads,)](m, total, acc, out, out.stride(0), out.stride(1),
                                             NH=heads, D=dim, SPLITS=splits, num_warps=1)
    return out
