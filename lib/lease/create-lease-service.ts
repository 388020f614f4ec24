import type { DataSource } from 'typeorm';
import { QueueBoxEvents } from '../events/queuebox.events';
import { resolveTables } from '../options/options.resolver';
import { type QueueBoxModuleOptions } from '../options/options.types';
import { createDialect } from '../queuebox.dialect';
import { LeaseService } from './lease.service';

/**
 * A `LeaseService` for a plain script or another framework: no Nest module needed, just an
 * initialized TypeORM DataSource with the QueueBox schema. Pass the same `tables` as the app that
 * receives the messages. Its events (claims lost) go to `node:diagnostics_channel`, or to `options.events`.
 *
 * @example
 * const lease = await createLeaseService(dataSource);
 * const claim = await lease.claim('payments', { leaseMs: 30_000 });
 */
export async function createLeaseService(
  dataSource: DataSource,
  options: { tables?: QueueBoxModuleOptions['tables']; events?: QueueBoxEvents } = {},
): Promise<LeaseService> {
  const dialect = createDialect(dataSource, resolveTables(options.tables));
  await dialect.schemaCheck();
  return new LeaseService(dialect, options.events ?? new QueueBoxEvents());
}
