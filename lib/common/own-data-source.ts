import type { DataSource, EntityManager } from 'typeorm';
import { QueueBoxValidationError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';

/**
 * Refuses a transaction of a DataSource that another QueueBox of the application works on (named
 * or attached as a tenant: the registry is the application's, shared by tenants' contexts): its
 * rows would go to this QueueBox's tables through the other one's connection (a raw "relation
 * does not exist", or a message in the wrong database, published there by the other QueueBox).
 * A DataSource no QueueBox knows is let through: the application may keep a second DataSource to
 * the same database.
 */
export function checkOwnDataSource(
  manager: EntityManager,
  call: string,
  own: { name: string; dataSource: DataSource; dataSourceName: string },
  registry: { on(dataSource: DataSource): { name: string; dataSourceName: string; tenant: boolean }[] } | undefined,
): void {
  const given = manager.connection;
  if (given === own.dataSource || given === undefined || registry === undefined) return;
  const others = registry.on(given);
  if (others.length === 0) return;
  throw new QueueBoxValidationError(
    'manager',
    messages.managerOfAnotherQueueBox(
      call,
      own.name,
      own.dataSourceName,
      others.map((entry) => entry.name),
      others[0].dataSourceName,
      others[0].tenant,
    ),
  );
}
