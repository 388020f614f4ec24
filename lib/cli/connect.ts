import { DataSource, type DataSourceOptions, type MigrationInterface } from 'typeorm';
import type { QueueBoxTables } from '../dialects/dialect';
import { connectionFailure } from './connection-errors';
import type { DatabaseTarget } from './database-url';

/** Opens a DataSource on `target` that knows the QueueBox migrations; a failure to connect becomes a one-line `CliFailure`. */
export async function openDataSource(
  target: DatabaseTarget,
  migrations: (new () => MigrationInterface)[],
  migrationsTableName: string,
): Promise<DataSource> {
  const dataSource = new DataSource({
    ...target.connection,
    migrations,
    migrationsTableName,
    logging: false,
  } as DataSourceOptions);
  try {
    await dataSource.initialize();
  } catch (error) {
    throw connectionFailure(error, target);
  }
  return dataSource;
}

/** Which of the two tables exist. */
export async function tablesPresent(
  dataSource: DataSource,
  tables: QueueBoxTables,
): Promise<{ outbox: boolean; inbox: boolean; instances: boolean }> {
  const runner = dataSource.createQueryRunner();
  try {
    return {
      outbox: await runner.hasTable(tables.outbox.qualified),
      inbox: await runner.hasTable(tables.inbox.qualified),
      instances: await runner.hasTable(tables.instances.qualified),
    };
  } finally {
    await runner.release();
  }
}
