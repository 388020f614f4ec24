import type { DataSource } from 'typeorm';
import type { QueueBoxAdmin } from '../admin/queuebox.admin';
import type { QueueBoxTables } from '../dialects/dialect';
import type { BacklogRow } from '../dialects/dialect-rows';
import { dialectDriver } from '../dialects/drivers';
import type { FinishedCountRow } from '../dialects/inspection.sql';
import { byComponentAndName } from '../dialects/records';

/** Rows of one destination (outbox) or source (inbox), by state: `QueueBoxAdmin.backlog()` plus `done`. */
export interface BacklogEntry extends BacklogRow {
  /** `sent` (outbox) or `processed` (inbox). */
  done: number;
}

/**
 * The backlog `queuebox status` prints: one entry per destination and per source, outbox first,
 * by name. Pending, processing, dead and the oldest due pending row come from
 * `QueueBoxAdmin.backlog()` (the one backlog query, served by partial indexes); the count of
 * finished rows, which the admin leaves out, is the CLI's own query.
 */
export async function readBacklog(admin: QueueBoxAdmin, dataSource: DataSource, tables: QueueBoxTables): Promise<BacklogEntry[]> {
  const query = dialectDriver(dataSource.options.type).inspection.finishedCount(tables);
  const [unfinished, finished] = await Promise.all([
    admin.backlog(),
    dataSource.query(query.sql, query.params) as Promise<FinishedCountRow[]>,
  ]);
  const entries = new Map<string, BacklogEntry>();
  for (const row of unfinished) entries.set(`${row.component}\u0000${row.name}`, { ...row, done: 0 });
  for (const row of finished) {
    const id = `${row.component}\u0000${row.name}`;
    const entry = entries.get(id) ?? {
      component: row.component,
      name: row.name,
      pending: 0,
      processing: 0,
      dead: 0,
      oldestPendingAgeSeconds: null,
      done: 0,
    };
    entry.done = Number(row.count);
    entries.set(id, entry);
  }
  return [...entries.values()]
    .map(({ component, name, pending, processing, done, dead, oldestPendingAgeSeconds }) => ({
      component,
      name,
      pending,
      processing,
      done,
      dead,
      oldestPendingAgeSeconds,
    }))
    .sort(byComponentAndName);
}
