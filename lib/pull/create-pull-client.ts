import type { DataSource } from 'typeorm';
import { createDialect } from '../core/create-dialect';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { QueueBoxEvents } from '../events/queuebox.events';
import { LeaseService } from '../lease/lease.service';
import { resolveTables } from '../options/options.resolver';
import { messages } from '../texts/queuebox.messages';
import type { QueueBoxModuleOptions } from '../types/options';
import { ClaimPauses } from '../workers/claim-pauses';
import { PullClient } from './pull.client';

/**
 * A `PullClient` and its `LeaseService` for a plain script or another framework: no Nest module
 * needed, just an initialized TypeORM DataSource with the QueueBox schema. Pass the same `tables`
 * as the app that receives the messages. Events (claims lost, dead letters) go to
 * `node:diagnostics_channel`, or to `options.events`.
 *
 * @example
 * const { pull, lease } = await createPullClient(dataSource);
 * const claim = await pull.claim('payments', { leaseMs: 30_000 });
 */
export async function createPullClient(
  dataSource: DataSource,
  options: { tables?: QueueBoxModuleOptions['tables']; events?: QueueBoxEvents } = {},
): Promise<{ pull: PullClient; lease: LeaseService }> {
  const dialect = createDialect(dataSource, resolveTables(options.tables));
  await dialect.schemaCheck();
  const events = options.events ?? new QueueBoxEvents();
  const lease = new LeaseService(dialect, events);
  return { pull: new PullClient(dialect, lease, events, new ClaimPauses(dialect)), lease };
}

/**
 * @deprecated Removed in 0.2.0: `createPullClient(dataSource, options)` resolves to `{ pull, lease }`.
 * Rejects with `QueueBoxConfigError` naming it.
 */
export async function createLeaseService(
  _dataSource: DataSource,
  _options: { tables?: QueueBoxModuleOptions['tables']; events?: QueueBoxEvents } = {},
): Promise<never> {
  throw new QueueBoxConfigError('createLeaseService', messages.createLeaseServiceRemoved());
}
