import type { DataSource } from 'typeorm';
import { createDialect } from '../dialects/dialects';
import { type QueueBoxModuleOptions, resolveOptions } from '../queuebox.options';
import { QueueBoxAdmin } from './queuebox.admin';
import { RetentionService } from './retention.service';

/**
 * A `QueueBoxAdmin` for a script, a CLI or another framework: no Nest module needed, just an
 * initialized TypeORM DataSource with the QueueBox schema. Pass the same `tables` as the app (and
 * its `retention` options if you call `runRetention()`; no retention timer is started here).
 *
 * @example
 * const admin = await createQueueBoxAdmin(dataSource, { tables: { outbox: 'messaging.outbox' } });
 * const replayed = await admin.replayDeadLetters({ component: 'outbox', name: 'billing' });
 */
export async function createQueueBoxAdmin(
  dataSource: DataSource,
  options: { tables?: QueueBoxModuleOptions['tables']; retention?: QueueBoxModuleOptions['retention'] } = {},
): Promise<QueueBoxAdmin> {
  // No worker runs here, so none of the worker options (a publisher, ...) is required.
  const resolved = resolveOptions({
    tables: options.tables,
    retention: options.retention,
    workers: { outbox: false, relay: false, pull: false },
  });
  const dialect = createDialect(dataSource, resolved.tables);
  await dialect.schemaCheck();
  return new QueueBoxAdmin(dialect, new RetentionService(resolved, dialect));
}
