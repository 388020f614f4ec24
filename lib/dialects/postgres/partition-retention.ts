// The partitioned layout's retention (issue 37, docs/partitioning.md, decision 5): drops the settled
// partitions whose finished rows are all past their retention age, without a lock on the parent
// that would stop inserts or claims. PostgreSQL only. RetentionService runs it (through
// `createPartitionKeeping`) under the retention lock (one replica at a time). A dialect leaf: it
// logs through the callbacks its creator gives it.

import { type TableName, tableBeside } from '../../common/identifiers';
import { messages } from '../../texts/queuebox.messages';
import type { PartitionAges, PartitionDropResult } from '../dialect';
import { listPartitions, type PartitionLog, type PartitionSql } from './partition-upkeep';
import {
  detachPartitionConcurrentlySql,
  dropPartitionSql,
  finalizeDetachSql,
  forgetSideRowsSql,
  type PartitionedKind,
  partitionExpiredSql,
  partitionStateSql,
  partitionUnfinishedSql,
  reattachPartitionSql,
  settlePartitionSql,
} from './partitions.sql';
import { pgTable } from './quoting';

export interface PartitionRetentionOptions {
  table: TableName;
  kind: PartitionedKind;
  /** Drops are logged; a partition attached again is warned of. */
  logger: PartitionLog;
}

/**
 * Drops settled partitions, oldest first, whose finished rows are all past `finishedAfterMs` (and
 * dead rows past `deadAfterMs`, or none). For each:
 *
 * 1. `DETACH PARTITION ... CONCURRENTLY`: SHARE UPDATE EXCLUSIVE on the parent, so inserts and
 *    claims go on; it waits for every transaction that could still see the partition, including
 *    one that took an id of it long ago and has not committed;
 * 2. the detached table is checked again, now that nothing can write it: a row that is unfinished
 *    or recent (a replay since the partition was settled, or a row a late transaction committed)
 *    puts the partition back (ATTACH; unsettled when a row is unfinished, so that claims look into
 *    it again), and the run stops there, since the partitions after it are younger;
 * 3. the side rows of its rows (message ids, dedupe keys) deleted, `FORGET_BATCH` ids a
 *    statement, so that no transaction holds back vacuum for long;
 * 4. `DROP TABLE`, which locks the detached table alone, and its bookkeeping row.
 *
 * A detach that stopped half way (a crash or a cancel between its two transactions) is finished
 * first (`FINALIZE`); one that completed before a crash is not detached again. The run stops at the
 * first partition it may not drop.
 */
export class PartitionRetention {
  constructor(
    private readonly sql: PartitionSql,
    private readonly options: PartitionRetentionOptions,
  ) {}

  async runOnce(ages: PartitionAges): Promise<PartitionDropResult> {
    const { table, kind } = this.options;
    const dropped: string[] = [];
    const reattached: string[] = [];
    const params = [ages.finishedAfterMs, ages.deadAfterMs === false ? null : ages.deadAfterMs];
    for (const partition of await listPartitions(this.sql.query, table)) {
      if (!partition.settled) break; // the oldest unsettled one: the rest are younger
      const [{ expired }] = await this.sql.query<{ expired: boolean }>(partitionExpiredSql(table, kind, partition.name), params);
      if (!expired) break;
      const [found] = await this.sql.query<{ state: 'attached' | 'pending' | 'detached' }>(partitionStateSql(), [
        pgTable(tableBeside(table, partition.name)),
        pgTable(table),
      ]);
      if (found?.state === 'attached') await this.sql.query(detachPartitionConcurrentlySql(table, partition.name));
      if (found?.state === 'pending') await this.sql.query(finalizeDetachSql(table, partition.name));
      // Nothing can write it now: this check is the one that counts.
      const [{ unfinished }] = await this.sql.query<{ unfinished: boolean }>(partitionUnfinishedSql(table, partition.name));
      const [{ expired: stillExpired }] = await this.sql.query<{ expired: boolean }>(
        partitionExpiredSql(table, kind, partition.name),
        params,
      );
      if (unfinished || !stillExpired) {
        await this.sql.query(reattachPartitionSql(table, { name: partition.name, from: String(partition.from), to: String(partition.to) }));
        // Claims look into it again at once, not after the upkeep's next run finds the row.
        if (unfinished) await this.sql.query(settlePartitionSql(table), [partition.name, false]);
        this.options.logger.warn(messages.partitionReattached(table.qualified, partition.name, unfinished));
        reattached.push(partition.name);
        break;
      }
      await this.forgetSideRows(partition);
      await this.sql.transaction(async (query) => {
        for (const statement of dropPartitionSql(table, partition.name)) await query(statement);
      });
      this.options.logger.log(messages.partitionDropped(table.qualified, partition.name, String(partition.from), String(partition.to)));
      dropped.push(partition.name);
    }
    return { dropped, reattached };
  }

  /** Each statement its own transaction: a run stopped half way deletes the rest next time, from the detached table. */
  private async forgetSideRows(partition: { name: string; from: bigint; to: bigint }): Promise<void> {
    const statement = forgetSideRowsSql(this.options.table, this.options.kind, partition.name);
    for (let from = partition.from; from < partition.to; from += FORGET_BATCH) {
      const to = from + FORGET_BATCH < partition.to ? from + FORGET_BATCH : partition.to;
      await this.sql.query(statement, [String(from), String(to)]);
    }
  }
}

/** Ids of a dropped partition whose side rows one statement deletes. */
const FORGET_BATCH = 10_000n;
