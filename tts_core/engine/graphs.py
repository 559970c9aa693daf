"""Static-shape decode step of the runner, captured as CUDA graphs per batch-size bucket.

A step for bucket B works on rows 0..B-1 of the runner's state (KV cache, hidden states, codec
rings, sampling tables): a batch is padded to the smallest bucket that holds its highest slot, and
the rows it does not step are masked (they keep their state; the runner gives its state spare rows
so every bucket fits). All per-step host data goes in through one small copy into a static input
buffer, and comes back through one copy out of a static output buffer, so the captured work never
sees a host value:

- LM step: the model's own per-frame step (`model/lm_step.py`: local transformer over the 17
  positions with sampling, then the one-row global decode), its units torch.compile'd on CUDA,
  with the repetition history update in between; the global decode writes into the static KV
  cache and attends over its fixed length under a mask built on the device from per-row lengths.
- Codec step: streaming decode of 1, 2 or 4 frames (one graph each) for the bucket's rows.

Per-stream uniforms are drawn on the host from each stream's own generator, so codes never depend
on which streams share the batch. With graphs off (`enforce_eager`, TTS_NO_CUDA_GRAPH=1, or a CPU
device) the very same functions run eagerly. This module only captures and replays: the math is
the model's.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from ..config import SamplingParams
from ..env import env_flag
from ..model import lm_step
from ..model.kv_cache import StaticDecodeAttender
from .sampler import packed_batch, param_row

logger = logging.getLogger(__name__)

NO_GRAPH_ENV = "TTS_NO_CUDA_GRAPH"
NO_COMPILE_ENV = "TTS_NO_COMPILE"
CODEC_PASS_FRAMES = (1, 2, 4)  # codec graphs per bucket: frames decoded by one pass (one replay)
MAX_PASSES_PER_COPY = 16  # codec passes staged per host-to-device copy in `decode`


def bucket_sizes(num_slots: int) -> list[int]:
    """Batch-size buckets 1, 2, 4, ... up to the first power of two >= num_slots."""
    if num_slots < 1:
        raise ValueError(f"num_slots must be >= 1, got {num_slots}")
    sizes = [1]
    while sizes[-1] < num_slots:
        sizes.append(2 * sizes[-1])
    return sizes


def pick_bucket(num_rows: int, buckets: list[int]) -> int:
    """Smallest bucket holding `num_rows` rows (buckets ascending)."""
    for size in buckets:
        if size >= num_rows:
            return size
    raise ValueError(f"{num_rows} rows exceed the largest bucket {buckets[-1]}")


def graphs_enabled(device: torch.device, enforce_eager: bool) -> bool:
    """CUDA graphs are used on CUDA unless `enforce_eager` or TTS_NO_CUDA_GRAPH=1."""
    return device.type == "cuda" and not enforce_eager and not env_flag(NO_GRAPH_ENV)


COMPILE_MODES = ("inductor", "aot_eager", "off")


def compile_mode(device: torch.device, requested: str | None = None) -> str:
    """How the LM step's units run: "inductor" (torch.compile), "aot_eager" (traced but not
    compiled: tests check tracing quickly on the CPU) or "off" (plain functions).

    Default: "inductor" on CUDA unless TTS_NO_COMPILE=1; "off" on CPU (the CPU path never compiles).
    """
    if requested is not None:
        if requested not in COMPILE_MODES:
            raise ValueError(f"compile mode must be one of {', '.join(COMPILE_MODES)}, got {requested!r}")
        return requested
    return "inductor" if device.type == "cuda" and not env_flag(NO_COMPILE_ENV) else "off"


def split_passes(num_frames: int, sizes: list[int]) -> list[int]:
    """Frames per codec pass for `num_frames` frames, largest passes first (e.g. 7 -> [4, 2, 1])."""
    passes = []
    for size in sorted(sizes, reverse=True):
        while num_frames >= size:
            passes.append(size)
            num_frames -= size
    assert num_frames == 0, f"pass sizes {sizes} must include 1"
    return passes


def padded_step_input(slots: list[int], uniforms: np.ndarray, has_room: np.ndarray, bucket: int) -> np.ndarray:
    """Host rows of one LM step for a bucket: [bucket, 1 + n_vq + 1] float32 = uniforms | step flag.

    Row s holds slot s; rows not stepped stay zero (flag 0: their state is left alone).
    """
    width = uniforms.shape[1] + 1
    rows = np.zeros((bucket, width), np.float32)
    rows[slots, :-1] = uniforms
    rows[slots, -1] = has_room
    return rows


def _book(is_stepped: torch.Tensor, is_continue: torch.Tensor, lengths: torch.Tensor, key_pos: torch.Tensor,
          scratch_col: int, mask_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """go [B], write columns [B] and the additive key mask [B, 1, 1, L] of the global step: rows that
    go on write at their length, the others at the scratch column; keys past a row's length are hidden."""
    go = is_stepped & is_continue
    write_pos = torch.where(go, lengths, torch.full_like(lengths, scratch_col))
    visible = key_pos[None, :] <= lengths[:, None]  # [B, L]
    key_mask = torch.zeros(visible.shape, dtype=mask_dtype, device=lengths.device)
    return go, write_pos, key_mask.masked_fill(~visible, float("-inf"))[:, None, None, :]


class StaticStepper:
    """Static buffers and per-bucket step functions over the runner's state (graphed on CUDA).

    Args:
        lm, codec: the models (eval, on `device`).
        cache: the runner's `KVCache`; its last column is scratch (rows that do not advance write there).
        codec_state: the runner's `CodecDecodeState` (same number of rows as the cache).
        hidden: the runner's [rows, H] last hidden state per slot.
        buckets: ascending batch sizes; the largest must not exceed the state's rows.
        use_graphs: capture CUDA graphs (CUDA only); else run the same functions eagerly.
    """

    def __init__(self, lm, codec, cache, codec_state, hidden: torch.Tensor, *, buckets: list[int],
                 use_graphs: bool, compile: str | None = None):
        self.lm = lm
        self.codec = codec
        self.cache = cache
        self.codec_state = codec_state
        self.hidden = hidden
        self.buckets = list(buckets)
        self.device = hidden.device
        rows = cache.num_slots
        if self.buckets[-1] > rows or codec_state.batch_size != rows:
            raise ValueError(f"buckets {self.buckets} need state rows >= {self.buckets[-1]}, got {rows}")
        c = lm.config
        self.n_vq = c.n_vq
        self.vocab = max(c.audio_codebook_sizes)
        dev = self.device
        # Per-slot sampling parameters, one float row per slot written when a stream begins (one
        # host-to-device copy): do_sample, then FilterParams' encoding of the audio and text heads.
        self.params = torch.tensor([param_row(SamplingParams.greedy(), self.vocab)] * rows, device=dev)
        self.seen = torch.zeros(rows, self.n_vq, self.vocab, dtype=torch.bool, device=dev)  # [R, K, V]
        self.lengths = torch.zeros(rows, dtype=torch.long, device=dev)  # device mirror of KV lengths
        self.scratch_col = cache.max_len - 1
        self.key_pos = torch.arange(cache.max_len, device=dev)  # [L]
        # Static per-step inputs / outputs.
        self.step_in = torch.zeros(rows, 1 + self.n_vq + 1, device=dev)  # uniforms | step flag
        self.step_out = torch.zeros(rows, 1 + self.n_vq, dtype=torch.long, device=dev)  # continue | codes
        self.pass_frames = [n for n in CODEC_PASS_FRAMES if n <= codec_state.max_frames_per_pass]
        most = max(self.pass_frames)
        # codes of up to `most` frames [F, K] flattened | active flag
        self.codec_in = torch.zeros(rows, most * self.n_vq + 1, dtype=torch.long, device=dev)
        self.samples_per_frame = codec.config.downsample_rate
        self.pcm_out = torch.zeros(rows, 2, most * self.samples_per_frame, device=dev)
        pin = dev.type == "cuda"
        self.host_step_in = torch.zeros(rows, 1 + self.n_vq + 1, pin_memory=pin)
        self.host_codec_in = torch.zeros(MAX_PASSES_PER_COPY, rows, most * self.n_vq + 1, dtype=torch.long,
                                         pin_memory=pin)
        # Keep what the graphs read alive even if the model later replaces its own copies.
        self._rope = lm.rope.get(cache.max_len, dev)
        self._graphs: dict[tuple[str, int, int], torch.cuda.CUDAGraph] = {}  # (kind, bucket, frames)
        self.local = lm.new_local_cache(rows, dev)  # the local transformer's scratch state
        # The LM step's units: compiled (CUDA default) or the plain functions.
        self.compile_mode = compile_mode(dev, compile)
        self.units = lm_step.EAGER if self.compile_mode == "off" else lm_step.StepUnits.compiled(self.compile_mode)
        self.use_graphs = bool(use_graphs) and dev.type == "cuda"
        if self.compile_mode != "off":
            self._warm_compiled()
        if self.use_graphs:
            self.capture()

    # ---- per-stream tables (outside the graphs) ----------------------------------------------

    @torch.inference_mode()
    def set_sampling(self, slot: int, params: SamplingParams) -> None:
        self.params[slot].copy_(torch.tensor(param_row(params, self.vocab)))

    @torch.inference_mode()
    def reset_slot(self, slot: int, length: int) -> None:
        """A new prompt of `length` rows is in the slot: fresh repetition history."""
        self.seen[slot] = False
        self.lengths[slot] = length

    # ---- the captured bodies ------------------------------------------------------------------

    def _lm_step(self, bucket: int) -> None:
        b = bucket
        step_in = self.step_in[:b]
        sampling = packed_batch(self.params[:b], step_in[:, :-1], self.seen[:b], self.vocab)
        hidden, seen, lengths = self.hidden[:b], self.seen[:b], self.lengths[:b]
        is_continue, codes = lm_step.frame(self.lm, hidden, sampling, self.local, self.units)  # [B], [B, K]
        go, write_pos, key_mask = _book(step_in[:, -1] > 0.5, is_continue, lengths, self.key_pos,
                                        self.scratch_col, self.cache.dtype)
        # Repetition history: seen[b, k, codes[b, k]] |= go[b].
        index = codes[:, :, None]  # [B, K, 1]
        seen.scatter_(2, index, seen.gather(2, index) | go[:, None, None])
        new_hidden = lm_step.global_step(self.lm, codes, lengths, StaticDecodeAttender(self.cache, write_pos, key_mask),
                                         self.cache.max_len, self.units)
        hidden.copy_(torch.where(go[:, None], new_hidden, hidden))
        lengths.add_(go.long())
        out = self.step_out[:b]
        out[:, 0] = is_continue.long()
        out[:, 1:] = codes

    def _codec_step(self, bucket: int, frames: int) -> None:
        b, n = bucket, frames
        codec_in = self.codec_in[:b]
        codes = codec_in[:, : n * self.n_vq].view(b, n, self.n_vq).transpose(1, 2)  # [B, K, n]
        state = self.codec_state if b == self.codec_state.batch_size else self.codec_state.narrow(0, b)
        pcm = self.codec.decode_frames_static(codes, state, codec_in[:, -1] > 0)  # [B, 2, 3840 n]
        self.pcm_out[:b, :, : n * self.samples_per_frame].copy_(pcm)

    def _run(self, kind: str, bucket: int, frames: int = 0) -> None:
        graph = self._graphs.get((kind, bucket, frames))
        if graph is not None:
            graph.replay()
        elif kind == "lm":
            self._lm_step(bucket)
        else:
            self._codec_step(bucket, frames)

    @torch.inference_mode()
    def _warm_compiled(self) -> None:
        """Compile the step's units for every bucket now (all rows masked: no state changes); if that
        fails, fall back to the plain functions rather than failing the engine."""
        self.step_in.zero_()
        try:
            for bucket in reversed(self.buckets):
                self._lm_step(bucket)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        except Exception:  # a compiler problem must not take the engine down
            logger.exception("compiled LM step (%s) failed: using the plain step", self.compile_mode)
            self.units = lm_step.EAGER
            self.compile_mode = "off"

    # ---- capture ------------------------------------------------------------------------------

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture the LM and codec steps of every bucket, largest first (they share one memory pool).

        Inputs are zero while capturing: every row is masked, so the warm-up runs change no state.
        """
        pool = torch.cuda.graph_pool_handle()
        with torch.cuda.device(self.device):
            stream = torch.cuda.Stream(self.device)
            self.step_in.zero_()
            self.codec_in.zero_()
            for bucket in reversed(self.buckets):
                bodies = [(("lm", bucket, 0), lambda b=bucket: self._lm_step(b))]
                bodies += [(("codec", bucket, n), lambda b=bucket, n=n: self._codec_step(b, n))
                           for n in self.pass_frames]
                for key, body in bodies:
                    stream.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(stream):
                        for _ in range(2):  # lazy initialisation (library handles, workspaces) first
                            body()
                    torch.cuda.current_stream().wait_stream(stream)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
                        body()
                    self._graphs[key] = graph
            torch.cuda.synchronize(self.device)
        logger.info("captured CUDA graphs for buckets %s on %s", self.buckets, self.device)

    # ---- per-step entry points (engine thread) ------------------------------------------------

    @torch.inference_mode()
    def step(self, bucket: int, rows: np.ndarray) -> np.ndarray:
        """One LM step; rows = `padded_step_input(...)` [bucket, 1 + K + 1].

        Returns int64 [bucket, 1 + K]: continue flag, then the frame's codes.
        """
        host = self.host_step_in[:bucket]
        host.copy_(torch.from_numpy(rows))
        self.step_in[:bucket].copy_(host, non_blocking=True)
        self._run("lm", bucket)
        return self.step_out[:bucket].cpu().numpy()

    @torch.inference_mode()
    def decode(self, bucket: int, slots: list[int], codes: np.ndarray) -> np.ndarray:
        """Decode codes [B, m, K] of `slots` (rows of this bucket) -> pcm [B, 2, 3840 m], in passes of
        `split_passes(m)` frames (one replay each; rows not in `slots` are masked)."""
        index = torch.as_tensor(slots, dtype=torch.long)
        device_index = index.to(self.device)
        codes_t = torch.from_numpy(np.ascontiguousarray(codes, dtype=np.int64))  # [B, m, K]
        passes = split_passes(codes_t.shape[1], self.pass_frames)
        pieces, start = [], 0
        for first in range(0, len(passes), MAX_PASSES_PER_COPY):
            group = passes[first : first + MAX_PASSES_PER_COPY]
            host = self.host_codec_in[: len(group), :bucket]
            host.zero_()
            offset = start
            for p, frames in enumerate(group):
                chunk = codes_t[:, offset : offset + frames].reshape(len(slots), -1)  # [B, n K]
                host[p, index, : chunk.shape[1]] = chunk
                offset += frames
            host[:, index, -1] = 1
            outputs = []
            for p, frames in enumerate(group):
                # Stream-ordered: this copy lands after the previous replay has read the buffer.
                self.codec_in[:bucket].copy_(host[p], non_blocking=True)
                self._run("codec", bucket, frames)
                pcm = self.pcm_out[:bucket, :, : frames * self.samples_per_frame]
                outputs.append(pcm.index_select(0, device_index))
            pieces.append(torch.cat(outputs, dim=-1).cpu())  # one sync per group of passes
            start = offset
        return torch.cat(pieces, dim=-1).numpy()
