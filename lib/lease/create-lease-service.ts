import type { DataSource } from 'typeorm';
import { createDialect } from '../dialects/dialects';
import { QueueBoxMetrics } from '../metrics/queuebox.metrics';
import { type QueueBoxModuleOptions, resolveTables } from '../queuebox.options';
import { LeaseService } from './lease.service';

/**
 * A `LeaseService` for a plain script or another framework: no Nest module needed, just an
 * initialized TypeORM DataSource with the QueueBox schema. Pass the same `tables` as the app that
 * receives the messages.
 *
 * @example
 * const lease = await createLeaseService(dataSource);
 * const claim = await lease.claim('payments', { leaseMs: 30_000 });
 */
export async function createLeaseService(
  dataSource: DataSource,
  options: { tables?: QueueBoxModuleOptions['tables']; metrics?: QueueBoxMetrics } = {},
): Promise<LeaseService> {
  const dialect = createDialect(dataSource, resolveTables(options.tables));
  await dialect.schemaCheck();
  return new LeaseService(dialect, options.metrics ?? new QueueBoxMetrics());
}
