import type { DataSource } from 'typeorm';
import { createDialect } from '../core/create-dialect';
import { resolveOptions } from '../options/options.resolver';
import type { OutboxOptions, QueueBoxModuleOptions } from '../types/options';
import { QueueBoxAdmin } from './queuebox.admin';
import { RetentionService } from './retention.service';

/**
 * A `QueueBoxAdmin` for a plain script or a CLI: no Nest module needed, just an initialized
 * TypeORM DataSource with the QueueBox schema. Pass the same `tables` (and `retention`, for
 * `runRetention()`; `outbox.sentRows`, so that a search for sent rows is refused where the app
 * deletes them) as the app. No timer runs: retention happens only when you call it.
 *
 * @example
 * const admin = await createQueueBoxAdmin(dataSource);
 * console.table(await admin.backlog());
 */
export async function createQueueBoxAdmin(
  dataSource: DataSource,
  options: Pick<QueueBoxModuleOptions, 'tables' | 'retention'> & { outbox?: Pick<OutboxOptions, 'sentRows'> } = {},
): Promise<QueueBoxAdmin> {
  const resolved = resolveOptions({
    tables: options.tables,
    retention: options.retention,
    outbox: { sentRows: options.outbox?.sentRows },
    workers: false,
  });
  const dialect = createDialect(dataSource, resolved.tables);
  await dialect.schemaCheck();
  return new QueueBoxAdmin(dialect, new RetentionService(resolved, dialect), undefined, resolved);
}
