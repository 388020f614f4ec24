import type { DataSource } from 'typeorm';
import type { QueueBoxTables } from '../dialects/dialect';
import { type BacklogCountRow, backlogQuery } from '../dialects/inspection.sql';

/** Rows of one destination (outbox) or source (inbox), by state. */
export interface BacklogEntry {
  component: 'outbox' | 'inbox';
  name: string;
  pending: number;
  processing: number;
  /** `sent` (outbox) or `processed` (inbox). */
  done: number;
  dead: number;
  /** Age of the oldest pending row (since it was enqueued or received), by the database clock; null when none is pending. */
  oldestPendingAgeSeconds: number | null;
}

/**
 * The backlog `queuebox status` prints: one entry per destination and per source.
 *
 * This is the CLI's own read-only query for now. `QueueBoxAdmin.backlog()` (in progress on another
 * branch) returns the same shape without `done`; once it lands, this function is the one place to
 * switch to it (keeping a count of finished rows, or dropping that column).
 */
export async function readBacklog(dataSource: DataSource, tables: QueueBoxTables): Promise<BacklogEntry[]> {
  const type = dataSource.options.type === 'mssql' ? 'mssql' : 'postgres';
  const query = backlogQuery(type, tables);
  const rows: BacklogCountRow[] = await dataSource.query(query.sql, query.params);
  const entries = new Map<string, BacklogEntry>();
  for (const row of rows) {
    const id = `${row.component}/${row.name}`;
    let entry = entries.get(id);
    if (!entry) {
      entry = { component: row.component, name: row.name, pending: 0, processing: 0, done: 0, dead: 0, oldestPendingAgeSeconds: null };
      entries.set(id, entry);
    }
    const count = Number(row.count);
    if (row.state === 'pending') {
      entry.pending = count;
      entry.oldestPendingAgeSeconds = row.oldest_age_seconds === null ? null : Math.max(0, Number(row.oldest_age_seconds));
    } else if (row.state === 'processing') entry.processing = count;
    else if (row.state === 'sent' || row.state === 'processed') entry.done = count;
    else if (row.state === 'dead') entry.dead = count;
  }
  return [...entries.values()];
}
