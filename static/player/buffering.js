// When may playback start (or resume after running dry)? A pure function of what has arrived so far.
//
// A generator slower than real time must be given a head start, or playback catches up with it and
// chops. If audio arrives at `rate` seconds of audio per second (rate < 1) and `remaining` seconds are
// still to come, starting with `buffered` seconds plays through when
//     buffered >= remaining * (1 / rate - 1) + largest chunk
// (the last term: audio arrives in lumps, and a lump is needed before it has fully arrived). The rate
// is measured from the stream's start (the response's headers: the server sends them with its first
// audio), but at most the first lump's length before that lump arrived; it is taken SAFETY slower
// than measured. Measuring from the start, not from the first arrival, keeps a late first lump (a
// busy main thread delivering several chunks at once) from making a slow stream look fast; the
// allowance keeps a merely late first read from making a fast stream look slow. When generation is fast, (1 / rate - 1) <= 0 and the short start
// (SHORT_START_S) applies, as before. Without an estimate of the total length nothing can be planned:
// the caller keeps its short start and growing rebuffers.
//
// After an underrun (`rebuffering`) the plan is made again with what went wrong in mind: the rate is
// measured over more data by then, and if the stream is already longer than its estimate, at least
// half of what has played is assumed to be still to come (estimates err short more than long).

// After an underrun `recentRate`, the arrival rate over the last RECENT_WINDOW_S, caps the measured
// rate: a link (or generator) that slowed down mid-way is planned for at its new pace, not its
// average, so the one rebuffer is long enough for the rest.

export const SHORT_START_S = 0.2;
export const SAFETY = 1.15;          // plan as if generation ran this much slower than measured
export const MIN_RATE_WINDOW_S = 0.02;
export const RECENT_WINDOW_S = 1.5;

/**
 * @param {object} p
 * @param {number} p.now            seconds, any clock (the worklet's currentTime)
 * @param {number|null} [p.startedAt]  `now` when the stream began (its response headers)
 * @param {number|null} p.firstArrival  `now` of the first arrival (null: nothing yet)
 * @param {number|null} p.lastArrival   `now` of the latest arrival
 * @param {number} p.arrivals       how many arrivals so far
 * @param {number} p.firstChunkS    seconds of audio in the first arrival (all that came at that instant)
 * @param {number} p.receivedS      seconds of audio received in all
 * @param {number} p.bufferedS      seconds of audio waiting to be played
 * @param {number|null} p.estimatedS the server's estimate of the whole output (null: unknown)
 * @param {number} p.largestChunkS  the largest single arrival so far, seconds
 * @param {boolean} p.ended         no more audio will come
 * @param {boolean} p.rebuffering   true after an underrun
 * @param {number} [p.shortStartS]  the start used when generation is fast
 * @param {number|null} [p.recentRate]  audio s per s over the last RECENT_WINDOW_S (recentRate())
 * @returns {{start: boolean, targetS: number|null, waitS: number|null, rate: number|null}}
 *   targetS: the buffer to wait for; waitS: the expected wait from now (null when it cannot be told).
 */
export function planStart(p) {
  const shortStart = p.shortStartS ?? SHORT_START_S;
  if (p.ended) return { start: p.bufferedS > 0, targetS: 0, waitS: 0, rate: null };
  let rate = arrivalRate(p);
  if (rate != null && p.rebuffering && p.recentRate > 0) rate = Math.min(rate, p.recentRate);
  if (p.estimatedS == null || !(p.estimatedS > 0)) {
    const start = p.bufferedS > 0 && p.bufferedS >= shortStart;
    return { start, targetS: shortStart, waitS: null, rate };
  }
  let remaining = Math.max(0, p.estimatedS - p.receivedS);
  if (p.rebuffering) remaining = Math.max(remaining, 0.5 * (p.receivedS - p.bufferedS));
  if (rate == null) {   // one arrival: nothing measured yet, unless everything is already here
    const all = remaining <= 0 && p.bufferedS > 0;
    return { start: all, targetS: null, waitS: null, rate };
  }
  const k = Math.max(0, SAFETY / rate - 1);   // seconds of head start per second still to come
  const lump = k > 0 ? p.largestChunkS * (p.rebuffering ? 2 : 1) : 0;
  const target = Math.max(shortStart, k * remaining + lump);
  if (p.bufferedS > 0 && p.bufferedS >= Math.min(target, p.bufferedS + remaining)) {
    return { start: true, targetS: target, waitS: 0, rate };
  }
  // While waiting, the buffer grows by `rate` per second and what is still to come shrinks by as much.
  const need = k * remaining + lump - p.bufferedS;
  const waitS = need <= 0 ? (shortStart - p.bufferedS) / rate : need / (rate * (1 + k));
  return { start: false, targetS: target, waitS: Math.max(0, waitS), rate };
}

/**
 * Seconds of audio per second since the start (the first arrival's audio excluded), or null if unmeasured.
 * Measured up to the latest arrival; once the next one is later than the average gap, up to now
 * (a generator that stalls is slower than its past).
 */
export function arrivalRate(p) {
  if (p.firstArrival == null || !(p.arrivals > 1)) return null;
  // The first lump may have waited up to its own length after the start (a busy page reading it late)
  // without saying anything about the generator; anything later than that counts as slow.
  const origin = p.startedAt != null ? Math.min(p.firstArrival, Math.max(p.startedAt, p.firstArrival - p.firstChunkS))
    : p.firstArrival;
  const gap = (p.lastArrival - p.firstArrival) / (p.arrivals - 1);
  const measured = p.lastArrival - origin;
  const span = Math.max(measured, p.now - origin - gap);
  const after = p.receivedS - p.firstChunkS;
  if (span < MIN_RATE_WINDOW_S || after <= 0) return null;
  return after / span;
}

/**
 * Audio seconds per second over the last `windowS` (null: too little history). `history` holds
 * [time, audio seconds received by then] per arrival, oldest first; `now` extends the window when
 * nothing has arrived lately (a stall is slow too).
 */
export function recentRate(history, now, windowS = RECENT_WINDOW_S) {
  if (history.length < 2) return null;
  const last = history[history.length - 1];
  let i = history.length - 2;
  while (i > 0 && last[0] - history[i][0] < windowS) i -= 1;
  const span = Math.max(last[0], now) - history[i][0];
  if (span < windowS / 2) return null;
  return (last[1] - history[i][1]) / span;
}
