import type { DataSource } from 'typeorm';
import { createQueueBoxAdmin } from '../admin/create-queuebox-admin';
import type { QueueBoxAdmin } from '../admin/queuebox.admin';
import type { QueueBoxTables } from '../dialects/dialect';
import { CliFailure } from './cli.errors';
import { cliMessages } from './cli.messages';
import { databaseTarget, describeTables, migrationsFor, namedTables, parseTables } from './cli-options';
import { type CliIo, type CommandValues, DEFAULT_MIGRATIONS_TABLE } from './command';
import { openDataSource, tablesPresent } from './connect';
import type { DatabaseTarget } from './database-url';

export interface AdminSession {
  admin: QueueBoxAdmin;
  dataSource: DataSource;
  tables: QueueBoxTables;
  target: DatabaseTarget;
}

/**
 * Connects (`--url`, `--tables`), checks both tables exist (else "schema missing", exit 1), runs
 * `work` with a `QueueBoxAdmin` on that DataSource and closes it. Callers parse their other
 * options before calling it, so a usage error never reaches the database.
 */
export async function withAdmin<T>(values: CommandValues, io: CliIo, work: (session: AdminSession) => Promise<T>): Promise<T> {
  const target = databaseTarget(values.url as string | undefined, io.env);
  const tables = parseTables(values.tables as string | undefined);
  // No migration runs here; the DataSource knows them only because openDataSource always says which.
  const dataSource = await openDataSource(target, migrationsFor(tables).classes, DEFAULT_MIGRATIONS_TABLE);
  try {
    const present = await tablesPresent(dataSource, tables);
    if (!present.outbox || !present.inbox) throw new CliFailure(cliMessages.schemaMissing(describeTables(tables)));
    const admin = await createQueueBoxAdmin(dataSource, { tables: namedTables(tables) });
    return await work({ admin, dataSource, tables, target });
  } finally {
    await dataSource.destroy();
  }
}
