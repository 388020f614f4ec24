// Pure functions over what the worker recorded: delivery, per-key order, latency percentiles.

/**
 * Delivery check of the sequence numbers in handler-start order: how many distinct messages
 * arrived, how many arrived more than once, and which never arrived.
 */
export function delivery(seqs, expected) {
  const seen = new Uint8Array(expected);
  let distinct = 0;
  let duplicates = 0;
  let foreign = 0;
  for (const seq of seqs) {
    if (seq < 0 || seq >= expected) foreign++;
    else if (seen[seq]) duplicates++;
    else {
      seen[seq] = 1;
      distinct++;
    }
  }
  return { distinct, duplicates, foreign, missing: expected - distinct };
}

/**
 * Per-key order: for each key, the first handler start of each message must come in enqueue order
 * (seq increasing). A redelivered duplicate is counted by `delivery`, not here. Returns the number
 * of messages that started before an earlier message of their key.
 */
export function orderViolations(seqs, keyOf) {
  const lastSeq = new Map();
  const seen = new Set();
  let violations = 0;
  for (const seq of seqs) {
    if (seen.has(seq)) continue;
    seen.add(seq);
    const key = keyOf(seq);
    const last = lastSeq.get(key);
    if (last !== undefined && seq < last) violations++;
    else lastSeq.set(key, seq);
  }
  return violations;
}

/** Nearest-rank percentile of an ascending array. */
export function percentile(sorted, p) {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

/** Latency of each message: its first handler start minus its enqueue commit, summarized. */
export function latencySummary(seqs, startTimes, commitTimes) {
  const firstStart = new Float64Array(commitTimes.length).fill(Number.NaN);
  for (let i = 0; i < seqs.length; i++) {
    const seq = seqs[i];
    if (seq >= 0 && seq < firstStart.length && Number.isNaN(firstStart[seq])) firstStart[seq] = startTimes[i];
  }
  const latencies = [];
  for (let seq = 0; seq < commitTimes.length; seq++) {
    if (!Number.isNaN(firstStart[seq]) && commitTimes[seq] > 0) latencies.push(firstStart[seq] - commitTimes[seq]);
  }
  latencies.sort((a, b) => a - b);
  return {
    count: latencies.length,
    p50: percentile(latencies, 50),
    p95: percentile(latencies, 95),
    p99: percentile(latencies, 99),
    max: latencies.length ? latencies[latencies.length - 1] : Number.NaN,
    // A handler that starts "before" the commit returned is normal (the notification or poll can
    // beat the producer's COMMIT reply); it shows as a small negative latency, kept as is.
    negative: latencies.filter((l) => l < 0).length,
  };
}

export const fmt = {
  int: (n) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : 'n/a'),
  ms: (n) => (Number.isFinite(n) ? (Math.abs(n) >= 100 ? n.toFixed(0) : n.toFixed(1)) : 'n/a'),
  ratio: (n) => (Number.isFinite(n) ? `${n.toFixed(2)}x` : 'n/a'),
  perMsg: (n) => (Number.isFinite(n) ? n.toFixed(3) : 'n/a'),
  mb: (kb) => (Number.isFinite(kb) ? (kb / 1024).toFixed(0) : 'n/a'),
  seconds: (ms) => `${(ms / 1000).toFixed(1)} s`,
};

/**
 * The median of several runs of one workload for one system: by msg/s, or by p99 for latency (the
 * lower middle for an even count). Its notes get the spread, and how many runs failed.
 */
export function median(runs) {
  if (runs.length === 1) return runs[0];
  const ok = runs.filter((r) => r.status === 'ok');
  if (ok.length === 0) return runs[0];
  const key = (r) => (r.latency ? r.latency.p99 : r.rate);
  const sorted = [...ok].sort((a, b) => key(a) - key(b));
  const chosen = sorted[Math.floor((sorted.length - 1) / 2)];
  const spread = ok[0].latency
    ? `p99 ${fmt.ms(key(sorted[0]))} to ${fmt.ms(key(sorted[sorted.length - 1]))} ms`
    : `${fmt.int(key(sorted[0]))} to ${fmt.int(key(sorted[sorted.length - 1]))} msg/s`;
  const failed = runs.length - ok.length;
  return {
    ...chosen,
    runs: runs.length,
    /** The lowest and highest of the key (msg/s, or W3's p99) over the runs that finished. */
    spread: { min: key(sorted[0]), max: key(sorted[sorted.length - 1]), runs: ok.length },
    notes: [
      `median of ${ok.length} runs (${spread})${failed ? `; ${failed} more failed: ${runs.find((r) => r.status !== 'ok').error}` : ''}`,
      ...chosen.notes,
    ],
  };
}
