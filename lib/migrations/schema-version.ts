import type { LoggerService } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import type { Dialect, QueueBoxTables } from '../dialects/dialect';
import { dialectDriver } from '../dialects/drivers';
import { DEFAULT_MIGRATION_NAMES, SCHEMA_MIGRATIONS, type SchemaMigration } from '../dialects/schema-migrations';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { messages } from '../texts/queuebox.messages';
import { QUEUEBOX_MIGRATION, type QueueBoxMigrationMark } from './queuebox.migration';

/** TypeORM's default name of its migrations table (DataSource option `migrationsTableName`). */
export const TYPEORM_MIGRATIONS_TABLE = 'migrations';

/**
 * Whether the app can run without a migration: `undefined` when it cannot (the default, so a
 * migration added later is required until said otherwise here), or why it can, for the warning.
 */
function optionalBecause(migration: SchemaMigration, options: ResolvedQueueBoxOptions, dataSource: DataSource): string | undefined {
  if (migration === 'operations' && !options.retention.enabled) return messages.operationsMigrationOptional();
  if (migration === 'claims') return messages.claimsMigrationOptional();
  if (migration === 'claimFunctions') return messages.claimFunctionsMigrationOptional();
  if (migration === 'claimProbes') return messages.claimProbesMigrationOptional();
  if (migration === 'rateLimits' && Object.keys(options.outbox.rateLimits).length === 0) return messages.rateLimitsMigrationOptional();
  // Where 004 runs no statement (PostgreSQL: text already compares byte for byte) it is optional; SQL Server's schema check refuses unmigrated key columns itself.
  if (migration === 'keyCollation' && dialectDriver(dataSource.options.type).noOpMigrations.keyCollation !== undefined) {
    return messages.keyCollationMigrationOptional();
  }
  return undefined;
}

/** The name this app's DataSource gives a QueueBox migration of `tables`, else the shipped default. */
function expectedName(dataSource: DataSource, migration: SchemaMigration, tables: QueueBoxTables): string {
  const registered = dataSource.migrations.find((instance) => {
    const mark = (instance as { [QUEUEBOX_MIGRATION]?: QueueBoxMigrationMark })[QUEUEBOX_MIGRATION];
    return mark?.migration === migration && mark.outbox === tables.outbox.qualified && mark.inbox === tables.inbox.qualified;
  });
  return registered?.name ?? DEFAULT_MIGRATION_NAMES[migration];
}

/**
 * Checks at start-up that TypeORM recorded every QueueBox migration this version needs, in the
 * DataSource's own migrations table (`migrationsTableName`). A required one missing throws a
 * `QueueBoxConfigError` naming it; an optional one logs a warning. Tables created without TypeORM
 * (plain SQL: no record of the first migration) cannot be versioned this way and are not checked.
 */
export async function checkSchemaVersion(dataSource: DataSource, options: ResolvedQueueBoxOptions, logger: LoggerService): Promise<void> {
  const migrationsTable = dataSource.options.migrationsTableName ?? TYPEORM_MIGRATIONS_TABLE;
  const driverOptions = dataSource.driver.options as { schema?: string; database?: string };
  const tablePath = dataSource.driver.buildTableName(migrationsTable, driverOptions.schema, driverOptions.database);
  const queryRunner = dataSource.createQueryRunner();
  let recorded: Set<string>;
  try {
    if (!(await queryRunner.hasTable(tablePath))) {
      recorded = new Set();
    } else {
      const rows: { name: string }[] = await queryRunner.manager
        .createQueryBuilder()
        .select(queryRunner.connection.driver.escape('name'), 'name')
        .from(tablePath, 'queuebox_migrations')
        .getRawMany();
      recorded = new Set(rows.map((row) => row.name));
    }
  } finally {
    await queryRunner.release();
  }
  const expected = SCHEMA_MIGRATIONS.map((migration) => ({ migration, name: expectedName(dataSource, migration, options.tables) }));
  if (!recorded.has(expected[0].name)) {
    logger.log(messages.schemaVersionUnchecked(expected[0].name, migrationsTable));
    return;
  }
  const missing = expected.filter((entry) => !recorded.has(entry.name));
  const required = missing.filter((entry) => optionalBecause(entry.migration, options, dataSource) === undefined);
  if (required.length > 0) {
    throw new QueueBoxConfigError(
      'migrations',
      messages.migrationsMissing(
        required.map((entry) => entry.name),
        migrationsTable,
      ),
    );
  }
  for (const entry of missing) {
    logger.warn(
      messages.migrationMissingOptional(entry.name, migrationsTable, optionalBecause(entry.migration, options, dataSource) as string),
    );
  }
}

const schemaChecked = new WeakSet<Dialect>();

/**
 * The start-up schema checks of one QueueBox: the recorded migrations first (a missing one is
 * named as the migration to run, not as the table it creates), then the dialect's check of the
 * tables and settings. Once per dialect, as soon as its DataSource is initialized: when the module
 * builds the dialect, or later, before the instance registers (a DataSource initialized after
 * start-up, or between the module's build and its `onModuleInit`). A failed check runs again at
 * the next call.
 */
export async function checkSchemaOnce(
  dataSource: DataSource,
  options: ResolvedQueueBoxOptions,
  dialect: Dialect,
  logger: LoggerService,
): Promise<void> {
  if (schemaChecked.has(dialect)) return;
  await checkSchemaVersion(dataSource, options, logger);
  await dialect.schemaCheck();
  schemaChecked.add(dialect);
}
