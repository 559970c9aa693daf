"""Static-shape steps of the runner, captured as CUDA graphs per batch bucket (and length bucket).

A step for bucket B works on rows 0..B-1 of the runner's state, the rows it does not step masked;
host data goes in and out through one copy into / out of static buffers, so captured work never
sees a host value. The LM step attends over the smallest length bucket holding its rows; the codec
step decodes 1, 2 or 4 frames. With `defer=True` the plain functions serve while a background
thread compiles, and `upgrade` captures between two steps. Graphs off: the same functions, eager.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import torch

from ...config import SamplingParams
from ...model import fused_ops, lm_step
from ..host_copy import HostPcm, PendingPcm, PinnedRing, ReadyPcm
from ..sampler import param_row
from .buckets import length_buckets, pick_bucket
from .capture_guard import no_gc_during_capture
from .codec_passes import CODEC_PASS_FRAMES, codec_attention, split_passes
from .prefill_graphs import PrefillGraphs
from .static_step import (
    CompileCancelled,
    Launched,
    StaticTensors,
    build_on_scratch,
    compile_mode,
    compile_on_scratch,
    step_static,
)

logger = logging.getLogger(__name__)

MAX_PASSES_PER_COPY = 16  # codec passes staged per host-to-device copy in `decode`


class CudaGraphs:
    """Static buffers and per-bucket step functions over the runner's state: `cache` (its last
    column is scratch for rows that do not advance), `codec_state` and `hidden` [rows, H]. `buckets`
    ascend to at most the state's rows; `use_graphs` captures on CUDA; `compile` and `defer` as in
    the module doc; `spare_row`, a row no stream uses, lets single prompts prefill by graph replay."""

    def __init__(self, lm, codec, cache, codec_state, hidden: torch.Tensor, *, buckets: list[int],
                 use_graphs: bool, compile: str | None = None, defer: bool = False, spare_row: int | None = None):
        self.lm = lm
        self.codec = codec
        self.codec_state = codec_state
        self.buckets = list(buckets)
        self.device = dev = hidden.device
        rows = cache.num_slots
        if self.buckets[-1] > rows or codec_state.batch_size != rows:
            raise ValueError(f"buckets {self.buckets} need state rows >= {self.buckets[-1]}, got {rows}")
        self.n_vq = lm.config.n_vq
        self.state = StaticTensors.allocate(lm, cache, hidden)
        self.lengths_buckets = length_buckets(cache.max_len)
        self.pass_frames = [n for n in CODEC_PASS_FRAMES if n <= codec_state.max_frames_per_pass]
        most = max(self.pass_frames)
        # codes of up to `most` frames [F, K] flattened | active flag
        self.codec_in = torch.zeros(rows, most * self.n_vq + 1, dtype=torch.long, device=dev)
        self.samples_per_frame = codec.config.downsample_rate
        self.pcm_out = torch.zeros(rows, 2, most * self.samples_per_frame, device=dev)
        self._host_pcm = HostPcm()
        pin = dev.type == "cuda"
        # Two of each, used in turn: a step may be launched while the one before is still running
        # (`launch`), so its input must not overwrite the buffer that step's copy may still read.
        self.host_step_in = torch.zeros(2, rows, 1 + self.n_vq + 1, pin_memory=pin)
        self.host_step_out = torch.zeros(2, rows, 1 + self.n_vq, dtype=torch.long, pin_memory=pin)
        self._turn = 0
        self.host_codec_in = torch.zeros(2, MAX_PASSES_PER_COPY, rows, most * self.n_vq + 1, dtype=torch.long,
                                         pin_memory=pin)
        self._codec_turn = 0
        self._codec_in_read: list[torch.cuda.Event | None] = [None, None]  # when each was last read
        self._pcm_ring = PinnedRing()
        # Keep what the graphs read alive even if the model later replaces its own copies.
        self._rope = lm.rope.get(cache.max_len, dev)
        self._graphs: dict[tuple[str, int, int], torch.cuda.CUDAGraph] = {}  # (kind, bucket, frames | length)
        self.capture_streams: dict[str, torch.cuda.Stream] = {}  # kind -> the stream its graphs were captured on
        self.spare_row = spare_row
        self.prefill_graphs: PrefillGraphs | None = None
        self._staged_params: dict[int, list[float]] = {}  # slot -> `param_row` (see `apply_staged`)
        self._staged_lengths: dict[int, int] = {}  # slot -> prompt rows
        self.units = lm_step.EAGER
        self.compile_mode = "off"
        self.use_graphs = False
        self._target_mode = compile_mode(dev, compile)
        self._target_graphs = bool(use_graphs) and dev.type == "cuda"
        self._compiled: lm_step.StepUnits | None = None
        self._compile_done = threading.Event()
        self._kernels_held = False
        if fused_ops.check_device(dev):
            if defer:
                # With an empty Triton cache, building the kernels is seconds before the first audio:
                # a deferred start serves on the plain ops and builds them with the compiled units.
                fused_ops.hold(dev)
                self._kernels_held = True
            else:
                self.warm_kernels()
        if not defer:
            if self._target_mode != "off":
                self._compiled = self._compile_units()
            self._compile_done.set()
            self.upgrade()

    # ---- start-up: compile, then switch over ---------------------------------------------------

    @property
    def upgraded(self) -> bool:
        return self.compile_mode == self._target_mode and self.use_graphs == self._target_graphs

    def _compile_units(self, before_each=None) -> lm_step.StepUnits | None:
        """The compiled units, built on scratch tensors for every bucket; None if compiling failed
        (a compiler problem must not take the engine down: the plain functions stay)."""
        try:
            if before_each is not None:  # importing the compiler (torch._dynamo) is seconds of interpreter
                before_each()  # work: not beside the warm-up or a first listener's stream
            units = lm_step.StepUnits.compiled(self._target_mode)
            compile_on_scratch(self.lm, units, self.buckets, self.state.cache.max_len, self.device, before_each)
        except CompileCancelled:
            return None
        except Exception:
            logger.exception("compiling the LM step (%s) failed: keeping the plain step", self._target_mode)
            return None
        return units

    def compile_in_background(self, before_each=None, on_ready=None) -> threading.Thread | None:
        """Start compiling in a daemon thread (deferred start-up); None when there is nothing to
        compile. `before_each` runs ahead of every unit compile (the engine passes a wait for idle);
        `on_ready()` once the units are built (the engine then upgrades between steps)."""
        if self._compile_done.is_set():
            return None

        def work() -> None:
            with fused_ops.building():  # the compiled units trace the kernels, held or not
                if self._kernels_held:
                    self._build_kernels(before_each)
                if self._target_mode != "off":
                    self._compiled = self._compile_units(before_each)
            self._compile_done.set()
            if on_ready is not None:
                on_ready()

        thread = threading.Thread(target=work, name="tts-compile", daemon=True)
        thread.start()
        return thread

    @torch.inference_mode()
    def upgrade(self) -> None:
        """Switch to the compiled units and capture the graphs (engine thread, between steps)."""
        if self._compiled is not None:
            self.units, self.compile_mode = self._compiled, self._target_mode
        else:
            self._target_mode = "off"
        if self._kernels_held:  # built in the background: from now on they serve (a variant the
            fused_ops.release(self.device)  # scratch run missed is built here, before the capture)
            self._kernels_held = False
            self.warm_kernels()
        if self._target_graphs:
            self.capture()
            self.use_graphs = True

    # ---- per-stream tables (outside the graphs) ----------------------------------------------

    # A stream's sampling row and prompt length are staged on the host and written for every staged
    # slot at once by `apply_staged` (before each step): a burst costs a few copies, not a
    # synchronising copy per stream.

    def set_sampling(self, slot: int, params: SamplingParams) -> None:
        self._staged_params[slot] = param_row(params, self.state.vocab)

    def reset_slot(self, slot: int, length: int) -> None:
        """A new prompt of `length` rows is in the slot: fresh repetition history (staged)."""
        self._staged_lengths[slot] = length

    @torch.inference_mode()
    def apply_staged(self) -> None:
        """Write the staged sampling rows, lengths and history resets to the device (no host sync:
        pageable sources are staged by the driver at once)."""
        dev = self.device
        if self._staged_lengths:
            slots = torch.tensor(list(self._staged_lengths)).to(dev, non_blocking=True)
            lengths = torch.tensor(list(self._staged_lengths.values())).to(dev, non_blocking=True)
            self.state.seen.index_fill_(0, slots, False)
            self.state.lengths.index_copy_(0, slots, lengths)
            self._staged_lengths.clear()
        if self._staged_params:
            slots = torch.tensor(list(self._staged_params)).to(dev, non_blocking=True)
            rows = torch.tensor(list(self._staged_params.values()), dtype=self.state.params.dtype)
            self.state.params.index_copy_(0, slots, rows.to(dev, non_blocking=True))
            self._staged_params.clear()

    # ---- the captured bodies ------------------------------------------------------------------

    def _codec_step(self, bucket: int, frames: int) -> None:
        b, n = bucket, frames
        codec_in = self.codec_in[:b]
        codes = codec_in[:, : n * self.n_vq].view(b, n, self.n_vq).transpose(1, 2)  # [B, K, n]
        state = self.codec_state if b == self.codec_state.batch_size else self.codec_state.narrow(0, b)
        kernel = fused_ops.fused_enabled(self.device) and self.codec.compute_dtype == torch.float32
        pcm = self.codec.decode_frames_static(codes, state, codec_in[:, -1] > 0,
                                              codec_attention(b, n, kernel))  # [B, 2, 3840 n]
        self.pcm_out[:b, :, : n * self.samples_per_frame].copy_(pcm)

    def _run(self, kind: str, bucket: int, size: int) -> None:
        graph = self._graphs.get((kind, bucket, size)) if self.use_graphs else None
        if graph is not None:
            graph.replay()
        elif kind == "lm":
            step_static(self.lm, self.state, bucket, size, self.units)
        else:
            self._codec_step(bucket, size)

    def _build_kernels(self, before_each=None) -> None:
        """Build the fused kernels on scratch tensors (a deferred start's background thread, inside
        `fused_ops.building()`): the live buffers are never touched."""
        try:
            build_on_scratch(self.lm, self.codec, self.buckets, self.state.cache.max_len, self.pass_frames,
                             self.device, before_each)
        except CompileCancelled:
            return
        except Exception as exc:  # a kernel problem must not take the engine down
            fused_ops.disable(f"they failed to build or run here ({type(exc).__name__}: {exc})")

    @torch.inference_mode()
    def warm_kernels(self) -> None:
        """Run the LM step once per length bucket and a codec pass of each size, every row masked, so
        Triton builds each fused-kernel variant now rather than in a listener's first chunk; kernels
        that cannot be built or run here are turned off for the process (the plain ops serve)."""
        self.state.step_in.zero_()
        self.codec_in.zero_()
        try:
            for length in self.lengths_buckets:
                step_static(self.lm, self.state, self.buckets[0], length, self.units)
            for frames in self.pass_frames:
                self._codec_step(self.buckets[-1], frames)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        except Exception as exc:  # a kernel problem must not take the engine down
            fused_ops.disable(f"they failed to build or run here ({type(exc).__name__}: {exc})")

    # ---- capture ------------------------------------------------------------------------------

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture the LM step of every (batch, length) bucket and the codec passes of every batch
        bucket, largest first; every row is masked while capturing, so warm-up runs change no state."""
        # Two memory pools: codec replays may run on their own stream while an LM replay runs, so
        # the two kinds must never share intermediate buffers.
        pools = {"lm": torch.cuda.graph_pool_handle(), "codec": torch.cuda.graph_pool_handle()}
        # ... nor one cuBLAS workspace (keyed by the capture stream): an LM replay and a codec replay
        # sharing one at once can hang, so each kind is captured on a stream of its own.
        streams = self.capture_streams = {kind: torch.cuda.Stream(self.device) for kind in pools}
        with torch.cuda.device(self.device), no_gc_during_capture():
            self.state.step_in.zero_()
            self.codec_in.zero_()
            for bucket in reversed(self.buckets):
                bodies = [(("lm", bucket, length), lambda b=bucket, n=length: step_static(
                    self.lm, self.state, b, n, self.units)) for length in reversed(self.lengths_buckets)]
                bodies += [(("codec", bucket, n), lambda b=bucket, n=n: self._codec_step(b, n))
                           for n in self.pass_frames]
                for key, body in bodies:
                    stream = streams[key[0]]
                    stream.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(stream):
                        for _ in range(2):  # lazy initialisation (library handles, workspaces) first
                            body()
                    torch.cuda.current_stream().wait_stream(stream)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=pools[key[0]], stream=stream,
                                          capture_error_mode="thread_local"):
                        body()
                    self._graphs[key] = graph
            torch.cuda.synchronize(self.device)
            if self.spare_row is not None:
                graphs = PrefillGraphs(self.lm, self.state.cache, self.state.hidden, self.spare_row, self.units.prefill)
                graphs.capture(torch.cuda.graph_pool_handle())
                self.prefill_graphs = graphs
        logger.info("captured CUDA graphs for batch buckets %s x lengths %s on %s", self.buckets,
                    self.lengths_buckets, self.device)

    # ---- per-step entry points (engine thread) ------------------------------------------------

    def prefill_one(self, slot: int, rows: np.ndarray) -> bool:
        """Prefill one prompt by a graph replay if one fits it (False: use the batched pass)."""
        graphs = self.prefill_graphs if self.use_graphs else None
        if graphs is None or not graphs.fits(rows.shape[0]):
            return False
        graphs.run(slot, rows)
        return True

    def length_bucket(self, needed: int) -> int:
        """Smallest attention length covering `needed` columns."""
        return pick_bucket(needed, self.lengths_buckets)

    @torch.inference_mode()
    def launch(self, bucket: int, rows: np.ndarray, needed: int | None = None) -> Launched:
        """Queue one LM step without waiting for it; rows = `padded_step_input(...)` [bucket, 1 + K + 1];
        `needed`: the largest KV length among the stepped rows + 1 (default: the whole cache). At most
        two launches may be uncollected at once (the host buffers alternate)."""
        length = self.length_bucket(needed) if needed is not None else self.lengths_buckets[-1]
        turn, self._turn = self._turn, 1 - self._turn
        host = self.host_step_in[turn, :bucket]
        host.copy_(torch.from_numpy(rows))
        self.state.step_in[:bucket].copy_(host, non_blocking=True)
        self._run("lm", bucket, length)
        out = self.host_step_out[turn, :bucket]
        out.copy_(self.state.step_out[:bucket], non_blocking=True)
        done = None
        if self.device.type == "cuda":
            done = torch.cuda.Event()
            done.record()
        return Launched(out, done)

    def collect(self, launch: Launched) -> np.ndarray:
        """Wait for a launched step: int64 [bucket, 1 + K], continue flag then the frame's codes."""
        if launch.done is not None:
            launch.done.synchronize()  # releases the GIL while it waits
        return launch.out.numpy().copy()

    @torch.inference_mode()
    def decode_async(self, bucket: int, slots: list[int], codes: np.ndarray) -> PendingPcm | ReadyPcm:
        """Queue the decode of codes [B, m, K] of `slots` (rows of this bucket) in passes of
        `split_passes(m)` frames (one replay each; rows not in `slots` are masked) and the copy of its
        audio to the host; `.result()` gives the B pcm arrays [2, 3840 m]."""
        index = torch.as_tensor(slots, dtype=torch.long)
        device_index = index.to(self.device, non_blocking=True)  # (a blocking copy would wait for the stream)
        codes_t = torch.from_numpy(np.ascontiguousarray(codes, dtype=np.int64))  # [B, m, K]
        passes = split_passes(codes_t.shape[1], self.pass_frames)
        pieces, start = [], 0
        for first in range(0, len(passes), MAX_PASSES_PER_COPY):
            group = passes[first : first + MAX_PASSES_PER_COPY]
            # Two staging buffers in turn: copies queued by the previous decode may still read the other.
            turn, self._codec_turn = self._codec_turn, 1 - self._codec_turn
            if self._codec_in_read[turn] is not None:
                self._codec_in_read[turn].synchronize()
            host = self.host_codec_in[turn, : len(group), :bucket]
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
            self._codec_in_read[turn] = self._event()
            pieces.append(torch.cat(outputs, dim=-1) if len(outputs) > 1 else outputs[0])
            start = offset
        pcm = torch.cat(pieces, dim=-1) if len(pieces) > 1 else pieces[0]
        if self.device.type != "cuda":
            return ReadyPcm(self._host_pcm.fetch(pcm))
        return self._pcm_ring.copy_async(pcm)

    def _event(self) -> torch.cuda.Event | None:
        if self.device.type != "cuda":
            return None
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))
        return event
