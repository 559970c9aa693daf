// The player's figures (StreamPlayer.stats; the studio shows them as window.playerStats, which the
// end-to-end tests read): per page (context, worklet, runs) and per run (cleared when a run starts).

export function createStats(requestedRate) {
  return {
    state: 'idle', workletLoaded: false, sampleRate: null, requestedRate, baseLatency: null,
    outputLatency: null, destinationChannels: null, runs: 0, waitS: null,
  };
}

/** Clear the per-run figures for run `runId`. */
export function clearRunStats(stats, runId) {
  Object.assign(stats, {
    runId, error: null, requestId: null,
    streamSampleRate: null, streamChannels: null, streamFormat: null, estimatedS: null,
    bytesReceived: 0, streamBytes: 0, networkReads: 0, chunksPosted: 0, framesReceived: 0, trailingBytes: 0,
    audioSeconds: 0, arrivals: [], underrunsAt: [],
    framesRendered: 0, underruns: 0, underrunFrames: 0, bufferedFrames: 0, bufferedMs: 0, firstAudioFrame: null,
    overflowFrames: 0, heldBackFrames: 0,
    startBufferedFrames: null, outputChannels: null, resampling: false, waitS: null, plan: null, statesSeen: [],
    ttfbMs: null, ttfpMs: null, ttfpMsgMs: null, rtf: null, xRealtime: null, elapsedMs: 0,
    transport: null, wire: '', liveGainDb: null,
  });
}

/** The audio context's figures (the worklet is loaded), kept up to date. */
export function watchContext(stats, ctx) {
  Object.assign(stats, {
    workletLoaded: true, sampleRate: ctx.sampleRate, baseLatency: ctx.baseLatency ?? null,
    destinationChannels: ctx.destination.channelCount, maxChannelCount: ctx.destination.maxChannelCount,
    audioState: ctx.state,
  });
  ctx.addEventListener('statechange', () => { stats.audioState = ctx.state; });
}

/** The worklet's counters `s` (its 'stats' messages) onto the page's figures. */
export function copyWorkletStats(stats, s) {
  Object.assign(stats, {
    framesRendered: s.framesRendered, underruns: s.underruns, underrunFrames: s.underrunFrames,
    bufferedFrames: s.buffered, bufferedMs: (s.buffered / s.contextRate) * 1000,
    outputChannels: s.outChannels, resampling: s.resampling, workletFramesReceived: s.framesReceived,
    underrunsAt: Array.from(s.underrunsAt.subarray(0, Math.min(s.underruns, s.underrunsAt.length))),
    workletState: s.state, startBufferedFrames: s.startBufferedFrames, plan: s.plan,
    overflowFrames: s.overflowFrames, liveGainDb: s.gainDb ?? null,
  });
}

/** RTF and x real time so far. */
export function updateRates(stats) {
  if (stats.audioSeconds > 0) {
    stats.rtf = stats.elapsedMs / 1000 / stats.audioSeconds;
    stats.xRealtime = 1 / stats.rtf;
  }
}
