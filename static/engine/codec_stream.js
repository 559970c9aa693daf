// The streaming codec decoder over codec_decode.onnx: its ring state kept here, in place. A pass
// returns the ring slots it wrote (and their entries), written back into the state; every other
// state entry comes back whole. The same class runs in the page's thread and in codec_worker.js.

export class CodecStream {
  /**
   * @param {object} ort  the onnxruntime-web module
   * @param {object} session  the codec_decode session
   * @param {object} codec  graphs.json's codec description
   */
  constructor(ort, session, codec) {
    this.ort = ort;
    this.session = session;
    this.codec = codec;
    this.reset();
  }

  /** A fresh state (a new text chunk restarts the decoder). */
  reset() {
    this.state = {};
    for (const spec of this.codec.state) {
      const size = spec.shape.reduce((a, b) => a * b, 1);
      const data = spec.dtype === 'int64' ? new BigInt64Array(size).fill(BigInt(spec.fill))
        : new Float32Array(size).fill(spec.fill);
      this.state[spec.name] = new this.ort.Tensor(spec.dtype, data, spec.shape);
    }
  }

  /** One frame's codes (n_q integers) -> its audio, interleaved stereo Float32Array. */
  async decode(codes) {
    const nq = this.codec.num_quantizers;
    const data = new BigInt64Array(nq);
    for (let q = 0; q < nq; q++) data[q] = BigInt(codes[q]);
    const out = await this.session.run({ codes: new this.ort.Tensor('int64', data, [1, nq, 1]), ...this.state });
    for (const spec of this.codec.state) {
      const target = this.state[spec.name].data;
      if (!spec.ring) { target.set(out[`${spec.name}_out`].data); continue; }
      const slots = out[spec.ring].data, fresh = out[`${spec.name}_new`].data;
      const [, heads, capacity, dim] = spec.shape;
      const n = slots.length;
      for (let h = 0; h < heads; h++) {
        for (let j = 0; j < n; j++) {
          const from = (h * n + j) * dim;
          target.set(fresh.subarray(from, from + dim), (h * capacity + Number(slots[j])) * dim);
        }
      }
    }
    const audio = out.audio.data;   // [1, 2, S]: left then right
    const samples = audio.length / 2;
    const pcm = new Float32Array(audio.length);
    for (let i = 0; i < samples; i++) { pcm[2 * i] = audio[i]; pcm[2 * i + 1] = audio[samples + i]; }
    return pcm;
  }
}
