"""Static-shape decode step of the runner, captured as CUDA graphs per batch-size bucket.

A step for bucket B works on rows 0..B-1 of the runner's state (KV cache, hidden states, codec
rings, sampling tables): a batch is padded to the smallest bucket that holds its highest slot, and
the rows it does not step are masked (they keep their state; the runner gives its state spare rows
so every bucket fits). All per-step host data goes in through one small copy into a static input
buffer, and comes back through one copy out of a static output buffer, so the captured work never
sees a host value:

- LM step: local transformer over the 17 positions with sampling (stop decision + 16 codes), the
  repetition history update, then the one-row global decode into the static KV cache, attending
  over the cache's fixed length under a mask built on the device from per-row lengths.
- Codec step: streaming decode of 1, 2 or 4 frames (one graph each) for the bucket's rows.

Per-stream uniforms are drawn on the host from each stream's own generator, so codes never depend
on which streams share the batch. With graphs off (`enforce_eager`, TTS_NO_CUDA_GRAPH=1, or a CPU
device) the very same functions run eagerly.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import torch

from ..config import SamplingParams
from ..sampling import FilterParams, SamplingBatch

logger = logging.getLogger(__name__)

NO_GRAPH_ENV = "TTS_NO_CUDA_GRAPH"
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
    env_off = os.environ.get(NO_GRAPH_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    return device.type == "cuda" and not enforce_eager and not env_off


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


def _param_row(params: SamplingParams, vocab: int) -> list[float]:
    """One slot's sampling parameters as floats (ids up to 2^24 are exact in float32)."""
    audio = FilterParams.build([params.audio_temperature], [params.audio_top_k], [params.audio_top_p], vocab=vocab)
    text = FilterParams.build([params.text_temperature], [params.text_top_k], [params.text_top_p], vocab=2)
    return [float(params.do_sample), float(audio.temperature), float(audio.kth_index), float(audio.top_p),
            float(params.audio_repetition_penalty), float(text.temperature), float(text.kth_index),
            float(text.top_p)]


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
                 use_graphs: bool):
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
        self.params = torch.tensor([_param_row(SamplingParams.greedy(), self.vocab)] * rows, device=dev)
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
        self.use_graphs = bool(use_graphs) and dev.type == "cuda"
        if self.use_graphs:
            self.capture()

    # ---- per-stream tables (outside the graphs) ----------------------------------------------

    @torch.inference_mode()
    def set_sampling(self, slot: int, params: SamplingParams) -> None:
        self.params[slot].copy_(torch.tensor(_param_row(params, self.vocab)))

    @torch.inference_mode()
    def reset_slot(self, slot: int, length: int) -> None:
        """A new prompt of `length` rows is in the slot: fresh repetition history."""
        self.seen[slot] = False
        self.lengths[slot] = length

    # ---- the captured bodies ------------------------------------------------------------------

    def _sampling(self, bucket: int, uniforms: torch.Tensor) -> SamplingBatch:
        p = self.params[:bucket]  # [B, 8], columns as in `_param_row`
        return SamplingBatch(
            do_sample=p[:, 0] > 0.5,
            audio=FilterParams(p[:, 1:2], p[:, 2:3].long(), p[:, 3:4], window=0, vocab=self.vocab),
            audio_repetition_penalty=p[:, 4],
            text=FilterParams(p[:, 5:6], p[:, 6:7].long(), p[:, 7:8], window=0, vocab=2),
            uniforms=uniforms,
            seen=self.seen[:bucket],
            # Fixed flags: both branches always run, so the kernels never depend on the rows' params.
            any_sample=True,
            all_sample=False,
            any_penalty=True,
        )

    def _lm_step(self, bucket: int) -> None:
        b = bucket
        step_in = self.step_in[:b]
        is_stepped = step_in[:, -1] > 0.5  # [B]: stepped and has room left in its KV cache
        sampling = self._sampling(b, step_in[:, :-1])
        hidden = self.hidden[:b]
        is_continue, codes = self.lm.generate_frame_static(hidden, sampling)  # [B], [B, K]
        go = is_stepped & is_continue
        # Repetition history: seen[b, k, codes[b, k]] |= go[b].
        index = codes[:, :, None]  # [B, K, 1]
        seen = self.seen[:b]
        seen.scatter_(2, index, seen.gather(2, index) | go[:, None, None])
        # Global decode: rows that go on write at their length, the others at the scratch column.
        lengths = self.lengths[:b]
        write_pos = torch.where(go, lengths, torch.full_like(lengths, self.scratch_col))
        visible = self.key_pos[None, :] <= lengths[:, None]  # [B, L]
        key_mask = torch.zeros(b, 1, 1, self.key_pos.shape[0], dtype=self.cache.dtype, device=self.device)
        key_mask.masked_fill_(~visible[:, None, None, :], float("-inf"))
        new_hidden = self.lm.decode_static(self.lm.frame_rows(codes), self.cache, lengths, write_pos, key_mask)
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
        self._local_cache = self.lm._local_cache  # read by the graphs: keep it alive
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
