// The partitioned layout's upkeep and retention for both tables, behind the Dialect seam
// (`Dialect.partitionKeeping`): what the module's PartitionKeeper and RetentionService run
// (issue 37, docs/partitioning.md). A dialect leaf: its statements go through the functions its
// creator gives it.

import type { QueueTable } from '../../types/claims';
import type { PartitionKeeping, QueueBoxTables } from '../dialect';
import type { DialectLog } from '../dialect-driver';
import { PartitionRetention } from './partition-retention';
import { type PartitionSql, PartitionUpkeep } from './partition-upkeep';

/**
 * The upkeep's sizes until they become options (docs/partitioning.md): a partition holds about an
 * hour of traffic at the recent rate, at least 100,000 ids; partitions are kept for two days of
 * traffic ahead at the highest rate seen, and never fewer than two.
 */
export const PARTITION_SIZES = { intervalMs: 3_600_000, aheadMs: 2 * 86_400_000, minSpan: 100_000 };

export function createPartitionKeeping(sql: PartitionSql, tables: QueueBoxTables, log: DialectLog): PartitionKeeping {
  const logger = { log: (message: string) => log.log?.(message), warn: (message: string) => log.warn(message) };
  const upkeep = (kind: QueueTable) => new PartitionUpkeep(sql, { table: tables[kind], kind, logger, ...PARTITION_SIZES });
  const retention = (kind: QueueTable) => new PartitionRetention(sql, { table: tables[kind], kind, logger });
  const upkeeps = { outbox: upkeep('outbox'), inbox: upkeep('inbox') };
  const retentions = { outbox: retention('outbox'), inbox: retention('inbox') };
  // One table after the other: each run holds one connection at a time.
  return {
    upkeep: async () => ({ outbox: await upkeeps.outbox.runOnce(), inbox: await upkeeps.inbox.runOnce() }),
    dropExpired: async (ages) => ({
      outbox: await retentions.outbox.runOnce(ages.outbox),
      inbox: await retentions.inbox.runOnce(ages.inbox),
    }),
  };
}
