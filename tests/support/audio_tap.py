"""What a StreamPlayer actually rendered, for the browser tests: a test-only AudioWorklet node that
records every quantum of the player's output (`StreamPlayer.output`) with its frame number. The
player's own worklet measures nothing per sample; the tests compare these samples with the source.

    install(frame, "window.mossPlayer.player")   # before playing
    ...play...
    heard = take(frame, s["firstAudioFrame"], s["framesRendered"] + s["underrunFrames"])   # [n, 2]
"""

from __future__ import annotations

import base64

import numpy as np

INSTALL = """async (expression) => {
  const player = eval(expression);
  await player.ready;
  const ctx = player.context;
  const code = `class Tap extends AudioWorkletProcessor {
    constructor() { super(); this.blocks = []; this.port.onmessage = () => { this.port.postMessage(this.blocks); this.blocks = []; }; }
    process(inputs) {
      const x = inputs[0];
      if (x && x.length) this.blocks.push([currentFrame, x[0].slice(), (x[1] || x[0]).slice()]);
      return true;
    }
  }
  registerProcessor('test-tap', Tap);`;
  await ctx.audioWorklet.addModule(URL.createObjectURL(new Blob([code], { type: 'text/javascript' })));
  const node = new AudioWorkletNode(ctx, 'test-tap', { numberOfInputs: 1, numberOfOutputs: 1, outputChannelCount: [2],
    channelCount: 2, channelCountMode: 'explicit' });
  player.output.connect(node);
  node.connect(ctx.destination);   // pulled by the graph like the player; its own output is silence
  window.testTap = node;
}"""

TAKE = """async ([first, count]) => {
  const blocks = await new Promise((resolve) => { window.testTap.port.onmessage = (e) => resolve(e.data);
                                                  window.testTap.port.postMessage('take'); });
  const out = new Float32Array(2 * count);
  let filled = 0;
  for (const [frame, L, R] of blocks) {
    for (let i = 0; i < L.length; i++) {
      const at = frame + i - first;
      if (at < 0 || at >= count) continue;
      out[2 * at] = L[i]; out[2 * at + 1] = R[i]; filled += 1;
    }
  }
  const bytes = new Uint8Array(out.buffer);
  let text = '';
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return { data: btoa(text), filled };
}"""


def install(frame, expression: str) -> None:
    """Tap the StreamPlayer that `expression` names in `frame` (a page or an iframe's frame)."""
    frame.evaluate(INSTALL, expression)


def take(frame, first_frame: int, count: int) -> np.ndarray:
    """The `count` frames rendered from context frame `first_frame` on, as float32 [count, 2]."""
    result = frame.evaluate(TAKE, [first_frame, count])
    assert result["filled"] == count, f"the tap heard {result['filled']} of {count} frames"
    return np.frombuffer(base64.b64decode(result["data"]), "<f4").reshape(-1, 2)
