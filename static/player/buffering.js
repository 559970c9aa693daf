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
 * @param {object} [out]  filled in and returned (the worklet passes one object, made once)
 * @returns {{start: boolean, targetS: number|null, waitS: number|null, rate: number|null}}
 *   targetS: the buffer to wait for; waitS: the expected wait from now (null when it cannot be told).
 */
export function planStart(p, out = {}) {
  const shortStart = p.shortStartS ?? SHORT_START_S;
  if (p.ended) return plan(out, p.bufferedS > 0, 0, 0, null);
  let rate = arrivalRate(p);
  if (rate != null && p.rebuffering && p.recentRate > 0) rate = Math.min(rate, p.recentRate);
  if (p.estimatedS == null || !(p.estimatedS > 0)) {
    return plan(out, p.bufferedS > 0 && p.bufferedS >= shortStart, shortStart, null, rate);
  }
  let remaining = Math.max(0, p.estimatedS - p.receivedS);
  if (p.rebuffering) remaining = Math.max(remaining, 0.5 * (p.receivedS - p.bufferedS));
  if (rate == null) {   // one arrival: nothing measured yet, unless everything is already here
    return plan(out, remaining <= 0 && p.bufferedS > 0, null, null, rate);
  }
  const k = Math.max(0, SAFETY / rate - 1);   // seconds of head start per second still to come
  const lump = k > 0 ? p.largestChunkS * (p.rebuffering ? 2 : 1) : 0;
  const target = Math.max(shortStart, k * remaining + lump);
  if (p.bufferedS > 0 && p.bufferedS >= Math.min(target, p.bufferedS + remaining)) {
    return plan(out, true, target, 0, rate);
  }
  // While waiting, the buffer grows by `rate` per second and what is still to come shrinks by as much.
  const need = k * remaining + lump - p.bufferedS;
  const waitS = need <= 0 ? (shortStart - p.bufferedS) / rate : need / (rate * (1 + k));
  return plan(out, false, target, Math.max(0, waitS), rate);
}

function plan(out, start, targetS, waitS, rate) {
  out.start = start; out.targetS = targetS; out.waitS = waitS; out.rate = rate;
  return out;
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
 * Audio seconds per second over the last `windowS` (null: too little history). `history` holds, per
 * arrival, its time and the audio seconds received by then, oldest first, in a circular buffer:
 * {t, s: Float64Array, start, count, size}; `now` extends the window when nothing has arrived
 * lately (a stall is slow too).
 */
export function recentRate(history, now, windowS = RECENT_WINDOW_S) {
  const { t, s, start, count, size } = history;
  if (count < 2) return null;
  const last = (start + count - 1) % size;
  let k = count - 2;
  while (k > 0 && t[last] - t[(start + k) % size] < windowS) k -= 1;
  const i = (start + k) % size;
  const span = Math.max(t[last], now) - t[i];
  if (span < windowS / 2) return null;
  return (s[last] - s[i]) / span;
}
