import type { Dialect } from '../dialects/dialect';
import type { ThroughputRow } from '../dialects/dialect-rows';
import type { MessageHistory } from '../dialects/message-rows';
import { byComponentAndName } from '../dialects/records';

export type HistoryBucket = MessageHistory['bucket'];

/** The length of each bucket. */
const BUCKET_MS: Record<HistoryBucket, number> = { minute: 60_000, hour: 3_600_000 };

/** The most buckets a history counts: one day of minutes, or 7 days of hours (and so the most kept). */
export const MAX_HISTORY: Record<HistoryBucket, number> = { minute: 1440, hour: 168 };

/**
 * How long after a bucket ends its counts are final. A row is stamped (`sent_at`, `processed_at`,
 * or, for a dead one, its last claim) before the transaction that finishes it commits, at most a
 * lease before; a row that commits later than this after its stamp is missing from a bucket
 * counted before it committed.
 */
export const HISTORY_SETTLE_MS = 3_600_000;

/** Counts of the buckets of `size` ms from `from` up to `to` (bucket boundaries, ms): each series holds (to - from) / size counts. */
interface Counted {
  from: number;
  to: number;
  size: number;
  series: ThroughputRow[];
}

/**
 * The history's counts, each settled bucket read from the tables once. A bucket that ended more
 * than HISTORY_SETTLE_MS ago is counted once and kept (per bucket size and grouping, at most the
 * longest window); every read counts only the buckets since then, so a 7-day history reads the
 * rows of its last hour or two, not of 7 days. The first read of a window counts all of it.
 *
 * Kept counts are the counts when their bucket settled: rows deleted (retention, a discard) or
 * replayed afterwards stay counted, as events that happened, until the process restarts.
 * Concurrent reads may count the same buckets; each entry is replaced whole, never changed.
 */
export class HistoryCounts {
  private readonly kept = new Map<string, Counted>();

  constructor(
    private readonly dialect: Pick<Dialect, 'adminHistory'>,
    /** The database clock: buckets are cut on it, as the rows are stamped by it. */
    private readonly clock: () => Promise<Date>,
    private readonly settleMs = HISTORY_SETTLE_MS,
  ) {}

  /** The last `buckets` buckets (at most MAX_HISTORY), the current one last. */
  async read(p: { bucket: HistoryBucket; buckets: number; byName: boolean }): Promise<Omit<MessageHistory, 'sentRowsKept'>> {
    const size = BUCKET_MS[p.bucket];
    const now = (await this.clock()).getTime();
    const current = Math.floor(now / size) * size;
    const since = current - (p.buckets - 1) * size;
    // Buckets starting before settledTo ended settleMs ago or more.
    const settledTo = Math.min(Math.floor((now - this.settleMs) / size) * size, current);
    const count = (from: number, to: number) => this.count(from, to, size, p.byName);

    const parts: Counted[] = [];
    if (settledTo > since) {
      const oldest = current - (MAX_HISTORY[p.bucket] - 1) * size;
      parts.push(slice(await this.settled(`${p.bucket}:${p.byName}`, since, settledTo, oldest, count), since));
    }
    const liveFrom = parts[0]?.to ?? since;
    parts.push(await count(liveFrom, current + size));
    return { since: new Date(since), bucket: p.bucket, buckets: p.buckets, rows: joined(parts) };
  }

  /** The kept counts, completed to cover [since, settledTo) and stored when no other read replaced them meanwhile. */
  private async settled(
    key: string,
    since: number,
    settledTo: number,
    oldest: number,
    count: (from: number, to: number) => Promise<Counted>,
  ): Promise<Counted> {
    const kept = this.kept.get(key);
    let next: Counted;
    if (!kept || kept.to < since || kept.from > settledTo) {
      next = await count(since, settledTo);
    } else {
      const parts = [kept];
      if (since < kept.from) parts.unshift(await count(since, kept.from));
      if (kept.to < settledTo) parts.push(await count(kept.to, settledTo));
      next = parts.length === 1 ? kept : { ...kept, from: parts[0].from, to: parts[parts.length - 1].to, series: joined(parts) };
    }
    if (next.from < oldest) next = slice(next, oldest);
    if (this.kept.get(key) === kept) this.kept.set(key, next);
    return next;
  }

  private async count(from: number, to: number, size: number, byName: boolean): Promise<Counted> {
    const series = await this.dialect.adminHistory({ since: new Date(from), bucketMs: size, buckets: (to - from) / size, byName });
    return { from, to, size, series };
  }
}

/** `counted` from `from` (a bucket boundary within it) on. */
function slice(counted: Counted, from: number): Counted {
  if (from <= counted.from) return counted;
  const skip = (from - counted.from) / counted.size;
  return {
    ...counted,
    from,
    series: counted.series.map((s) => ({ ...s, finished: s.finished.slice(skip), dead: s.dead.slice(skip) })),
  };
}

/** The number of buckets `counted` holds (every series holds as many). */
function bucketsOf(counted: Counted): number {
  return (counted.to - counted.from) / counted.size;
}

/** Contiguous parts, oldest first, as one series per (component, name); a series missing from a part counts 0 there. */
function joined(parts: Counted[]): ThroughputRow[] {
  const lengths = parts.map(bucketsOf);
  const series = new Map<string, ThroughputRow>();
  parts.forEach((part, i) => {
    for (const s of part.series) {
      const id = `${s.component}\u0000${s.name}`;
      let row = series.get(id);
      if (!row) {
        row = { component: s.component, name: s.name, finished: [], dead: [] };
        series.set(id, row);
      }
      const before = lengths.slice(0, i).reduce((a, b) => a + b, 0);
      row.finished.push(...new Array(before - row.finished.length).fill(0), ...s.finished);
      row.dead.push(...new Array(before - row.dead.length).fill(0), ...s.dead);
    }
  });
  const total = lengths.reduce((a, b) => a + b, 0);
  for (const row of series.values()) {
    row.finished.push(...new Array(total - row.finished.length).fill(0));
    row.dead.push(...new Array(total - row.dead.length).fill(0));
  }
  return [...series.values()].sort(byComponentAndName);
}
