// The audio graph: one AudioContext and the 'pcm-player' worklet node (worklet.js), made once and
// kept; a context the browser holds back until a gesture is resumed on the next click.

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class AudioOut {
  /**
   * @param {number} rate  the context rate to ask for (the worklet resamples if refused)
   * @param {(message: object) => void} onMessage  the worklet's messages
   * @param {number} ringSeconds  the worklet's ring, made once (its producer posts no more than fits)
   */
  constructor(rate, onMessage, ringSeconds) {
    this.wantRate = rate;
    this.ringSeconds = ringSeconds;
    this.onMessage = onMessage;
    this.ctx = null;
    this.node = null;
    this.ready = null;
  }

  init() {
    if (this.ready) return this.ready;
    if (!window.AudioContext || !window.isSecureContext) {
      this.ready = Promise.reject(new Error(
        'This browser cannot play the stream here: AudioWorklet needs HTTPS or localhost.'));
      return this.ready;
    }
    try {
      this.ctx = new AudioContext({ sampleRate: this.wantRate, latencyHint: 'interactive' });
    } catch (_) {   // a browser may refuse the rate: take its own, the worklet resamples
      this.ctx = new AudioContext({ latencyHint: 'interactive' });
    }
    this.ready = this.ctx.audioWorklet.addModule(new URL('worklet.js', import.meta.url).href).then(() => {
      this.node = new AudioWorkletNode(this.ctx, 'pcm-player', {
        numberOfInputs: 0, numberOfOutputs: 1, outputChannelCount: [2],
        processorOptions: { ringSeconds: this.ringSeconds },
      });
      this.node.port.onmessage = (e) => this.onMessage(e.data);
      this.node.connect(this.ctx.destination);
    });
    return this.ready;
  }

  /** Called synchronously inside a click (here or in the parent page): lets the context start. */
  unlock() {
    this.init().catch(() => {});
    if (this.ctx && this.ctx.state !== 'running') this.ctx.resume().catch(() => {});
  }

  /** Resolves once the context runs; `askForClick` shows a button and resolves when it is clicked. */
  async resume(askForClick) {
    await this.init();
    if (this.ctx.state === 'running') return;
    await Promise.race([this.ctx.resume(), sleep(400)]);
    if (this.ctx.state === 'running') return;
    await askForClick(() => this.ctx.resume());
  }

  post(message, transfer) {
    if (this.node) this.node.port.postMessage(message, transfer || []);
  }

  /** Seconds between a sample leaving the worklet and being heard. */
  get latencyS() {
    if (!this.ctx) return 0;
    return Math.min(0.5, this.ctx.outputLatency || this.ctx.baseLatency || 0);
  }
}
