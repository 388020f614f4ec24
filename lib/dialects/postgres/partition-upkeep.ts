// The partitioned layout's upkeep (issue 37, docs/partitioning.md): keeps partitions of a table by
// `id` range created ahead of the ids handed out, and settles the partitions no row of which can be
// unfinished any more, which moves the claims' low mark up. PostgreSQL only. The module's
// PartitionKeeper runs it (through `createPartitionKeeping`); the claims' low mark comes next
// (docs/partitioning.md, the plan). A dialect leaf: it logs through the callbacks its creator gives it.

import type { TableName } from '../../common/identifiers';
import { messages } from '../../texts/queuebox.messages';
import type { PartitionUpkeepResult } from '../dialect';
import {
  createPartitionSql,
  idSampleSql,
  listPartitionsSql,
  lockPartitionRowSql,
  lowMarkSql,
  type PartitionedKind,
  partitionName,
  partitionUnfinishedSql,
  partitionUpkeepTryLockSql,
  settlePartitionSql,
} from './partitions.sql';
import { pgTable } from './quoting';

/** Runs one statement; rows come back as the driver gives them. */
export type PartitionQuery = <R = Record<string, unknown>>(sql: string, params?: unknown[]) => Promise<R[]>;

/** Where the partitions' log lines go (a Nest logger, in the module). */
export interface PartitionLog {
  log(message: string): void;
  warn(message: string): void;
}

/** Where the upkeep's statements run: alone, or several in one transaction. */
export interface PartitionSql {
  query: PartitionQuery;
  transaction<T>(work: (query: PartitionQuery) => Promise<T>): Promise<T>;
}

export interface PartitionUpkeepOptions {
  table: TableName;
  kind: PartitionedKind;
  /** About how much traffic one partition spans, at the highest recent rate (ms). */
  intervalMs: number;
  /** How much traffic the partitions ahead of the last id hold, at the highest recent rate (ms); never fewer than two partitions. */
  aheadMs: number;
  /** The fewest ids a partition spans: before any rate is known, and when traffic is low. */
  minSpan: number;
  /** The clock that dates the samples (tests step it). Only the rate depends on it. */
  now?: () => number;
  /** Partitions created and settled are logged; a settled partition found unfinished again is warned of. */
  logger: PartitionLog;
}

/** What one run did. */
/** A partition as its bookkeeping row has it. */
export interface Partition {
  name: string;
  ordinal: number;
  from: bigint;
  to: bigint;
  settled: boolean;
}

/** One reading of the last id handed out and of the transactions running, at `at` ms. */
interface IdSample {
  at: number;
  lastId: bigint;
  /**
   * The next transaction id: every transaction that had a transaction id by then has a smaller one
   * (one that had taken an id of the table but not yet its transaction id, a moment later in the
   * same statement, is covered by the next sample: see `sealedThrough`).
   */
  xmax: bigint;
}

/** Samples kept: the rate is the highest between two consecutive ones within `aheadMs`. */
const SAMPLES_KEPT = 120;

/**
 * The shortest time a rate is measured over: ids handed out in a burst shorter than this count as
 * spread over it, so that two runs a few milliseconds apart do not read a burst as a rate to
 * provision a day for.
 */
export const RATE_WINDOW_MS = 10_000;

/**
 * Keeps a table partitioned by `id` range ahead of its inserts, and settles its finished
 * partitions.
 *
 * **Ahead.** After each run, the partitions above the last id handed out hold at least `aheadMs`
 * of traffic at the highest rate seen between two runs (and at least two partitions); each new
 * partition spans about `intervalMs` of it, at least `minSpan` ids. There is no DEFAULT partition
 * (PostgreSQL cannot then detach partitions concurrently), so this is what keeps inserts from
 * failing; no clock is involved in where a row goes, only in the rate.
 *
 * **Settled.** A partition is settled when no insert can reach it any more and it holds no
 * `pending` or `processing` row. "No insert can reach it": its ids were all handed out by the time
 * of one sample, and every transaction that ran at the sample after that one has ended (the
 * current xmin has passed that later sample's xmax). A transaction takes its id and its
 * transaction id in the same statement, so the later sample covers the moment between the two.
 * Each run also checks the settled partitions again, and unsettles one that holds an unfinished
 * row (a replay unsettles its partition itself; this is the net).
 */
export class PartitionUpkeep {
  private readonly samples: IdSample[] = [];
  private readonly now: () => number;

  constructor(
    private readonly sql: PartitionSql,
    private readonly options: PartitionUpkeepOptions,
  ) {
    this.now = options.now ?? Date.now;
  }

  async runOnce(): Promise<PartitionUpkeepResult> {
    const sample = await this.sample();
    const created = await this.createAhead(sample.lastId);
    const { settled, unsettled } = await this.settle(sample.xmin);
    return { created, settled, unsettled };
  }

  /** The first id claims need look at: the oldest partition not settled; undefined before the first partition. */
  async lowMark(): Promise<bigint | undefined> {
    const [row] = await this.sql.query<{ low: string | null }>(lowMarkSql(this.options.table));
    return row?.low == null ? undefined : BigInt(row.low);
  }

  /** The highest rate of ids, per ms, between two consecutive samples within `aheadMs` (over at least RATE_WINDOW_MS); 0 before two samples. */
  idsPerMs(): number {
    let highest = 0;
    const since = this.now() - this.options.aheadMs;
    for (let i = 1; i < this.samples.length; i++) {
      const [earlier, later] = [this.samples[i - 1], this.samples[i]];
      const elapsed = later.at - earlier.at;
      // A clock stepped back, or two samples in the same millisecond, tell nothing of the rate.
      if (later.at < since || elapsed <= 0 || later.lastId < earlier.lastId) continue;
      highest = Math.max(highest, Number(later.lastId - earlier.lastId) / Math.max(elapsed, RATE_WINDOW_MS));
    }
    return highest;
  }

  private async sample(): Promise<IdSample & { xmin: bigint }> {
    const [row] = await this.sql.query<{ last_id: string | null; xmax: string; xmin: string }>(idSampleSql(), [
      pgTable(this.options.table),
    ]);
    const sample = { at: this.now(), lastId: BigInt(row.last_id ?? 0), xmax: BigInt(row.xmax) };
    this.samples.push(sample);
    if (this.samples.length > SAMPLES_KEPT) this.samples.shift();
    return { ...sample, xmin: BigInt(row.xmin) };
  }

  private async createAhead(lastId: bigint): Promise<string[]> {
    const { table, kind, intervalMs, aheadMs, minSpan } = this.options;
    const rate = this.idsPerMs();
    const span = BigInt(Math.max(minSpan, Math.ceil(rate * intervalMs)));
    const ahead = BigInt(Math.ceil(rate * aheadMs));
    return this.sql.transaction(async (query) => {
      const [lock] = await query<{ locked: boolean }>(partitionUpkeepTryLockSql(), [`queuebox_partitions_${table.qualified}`]);
      if (!lock.locked) return [];
      const partitions = await listPartitions(query, table);
      const last = partitions.at(-1);
      let top = last?.to ?? 1n;
      let ordinal = last?.ordinal ?? 0;
      let partitionsAhead = partitions.filter((p) => p.from > lastId).length;
      const created: string[] = [];
      while (top - 1n - lastId < ahead || partitionsAhead < 2) {
        ordinal++;
        const name = partitionName(table, ordinal);
        const from = top;
        // Ids handed out past the last partition (inserts that failed for want of one) get one
        // partition of their own, rather than a partition of `span` for each.
        top = from + span > lastId + 1n ? from + span : lastId + 1n;
        for (const statement of createPartitionSql(table, kind, { name, ordinal, from: String(from), to: String(top) }))
          await query(statement);
        this.options.logger.log(
          messages.partitionCreated(table.qualified, name, String(from), String(top), rate > 0 ? Math.round(Number(span) / rate) : 0),
        );
        created.push(name);
        if (from > lastId) partitionsAhead++;
      }
      return created;
    });
  }

  /** Settles what can be, and unsettles a settled partition that holds an unfinished row again. */
  private async settle(xmin: bigint): Promise<Omit<PartitionUpkeepResult, 'created'>> {
    const { table } = this.options;
    const sealedThrough = this.sealedThrough(xmin);
    const settled: string[] = [];
    const unsettled: string[] = [];
    for (const partition of await listPartitions(this.sql.query, table)) {
      if (!partition.settled && (sealedThrough === undefined || partition.to - 1n > sealedThrough)) continue;
      const changed = await this.sql.transaction(async (query) => {
        const [row] = await query<{ settled_at: Date | null }>(lockPartitionRowSql(table), [partition.name]);
        if (!row) return false; // dropped meanwhile
        const [{ unfinished }] = await query<{ unfinished: boolean }>(partitionUnfinishedSql(table, partition.name));
        const settledNow = row.settled_at !== null;
        if (settledNow === !unfinished) return false;
        await query(settlePartitionSql(table), [partition.name, !unfinished]);
        return true;
      });
      if (!changed) continue;
      if (partition.settled) {
        unsettled.push(partition.name);
        this.options.logger.warn(messages.partitionUnsettled(table.qualified, partition.name));
      } else {
        settled.push(partition.name);
        this.options.logger.log(messages.partitionSettled(table.qualified, partition.name));
      }
    }
    return { settled, unsettled };
  }

  /**
   * The last id no insert can write any more: the last id of the newest sample whose next sample's
   * xmax the current xmin has passed (every transaction running then has ended). Undefined until
   * there is one.
   */
  private sealedThrough(xmin: bigint): bigint | undefined {
    for (let i = this.samples.length - 2; i >= 0; i--) {
      if (this.samples[i + 1].xmax <= xmin) return this.samples[i].lastId;
    }
    return undefined;
  }
}

/** A table's partitions from its bookkeeping, oldest first. */
export async function listPartitions(query: PartitionQuery, table: TableName): Promise<Partition[]> {
  const rows = await query<{ name: string; ordinal: number; from_id: string; to_id: string; settled_at: Date | null }>(
    listPartitionsSql(table),
  );
  return rows.map((row) => ({
    name: row.name,
    ordinal: row.ordinal,
    from: BigInt(row.from_id),
    to: BigInt(row.to_id),
    settled: row.settled_at !== null,
  }));
}
