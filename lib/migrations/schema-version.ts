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
  if (migration === 'unkeyedClaims') return messages.unkeyedClaimsMigrationOptional();
  if (migration === 'keyedClaims') return messages.keyedClaimsMigrationOptional();
  if (migration === 'claimPlans') return messages.claimPlansMigrationOptional();
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

/** Where the recorded QueueBox migrations stand against this version's (`queuebox doctor`, the database warnings). */
export interface MigrationState {
  /** TypeORM's migrations table read. */
  migrationsTable: string;
  /** False when the tables' first migration is not recorded (plain SQL): nothing more is known. */
  checked: boolean;
  /** Migrations of this version that are recorded (every one when not checked: the plain-SQL scripts are assumed whole). */
  applied: SchemaMigration[];
  /** Migrations of this version that are not recorded; `required` ones stop start-up, the others are named by a warning. */
  behind: { migration: SchemaMigration; name: string; required: boolean; consequence: string | null }[];
  /**
   * Recorded QueueBox migrations this version does not know, newer than its own (a later QueueBox
   * migrated this database: this process is older than its schema).
   */
  ahead: string[];
}

// A shipped migration's name: QueueBox<Word><13-digit timestamp>.
const SHIPPED_NAME = /^QueueBox([A-Z][A-Za-z]*)(\d{13})$/;

/** Reads TypeORM's migrations table and compares it with the migrations this version needs (as `checkSchemaVersion` does at start-up). */
export async function readMigrationState(dataSource: DataSource, options: ResolvedQueueBoxOptions): Promise<MigrationState> {
  const migrationsTable = dataSource.options.migrationsTableName ?? TYPEORM_MIGRATIONS_TABLE;
  const recorded = await recordedMigrations(dataSource, migrationsTable);
  const expected = SCHEMA_MIGRATIONS.map((migration) => ({ migration, name: expectedName(dataSource, migration, options.tables) }));
  if (!recorded.has(expected[0].name)) return { migrationsTable, checked: false, applied: [...SCHEMA_MIGRATIONS], behind: [], ahead: [] };
  const behind = expected
    .filter((entry) => !recorded.has(entry.name))
    .map((entry) => {
      const consequence = optionalBecause(entry.migration, options, dataSource) ?? null;
      return { ...entry, required: consequence === null, consequence };
    });
  const known = new Set(Object.values(DEFAULT_MIGRATION_NAMES).map((name) => SHIPPED_NAME.exec(name)?.[1]));
  const newest = Math.max(...Object.values(DEFAULT_MIGRATION_NAMES).map((name) => Number(SHIPPED_NAME.exec(name)?.[2] ?? 0)));
  const ahead = [...recorded].filter((name) => {
    const shipped = SHIPPED_NAME.exec(name);
    return shipped !== null && !known.has(shipped[1]) && Number(shipped[2]) > newest;
  });
  return {
    migrationsTable,
    checked: true,
    applied: expected.filter((entry) => recorded.has(entry.name)).map((entry) => entry.migration),
    behind,
    ahead: ahead.sort(),
  };
}

/** The names TypeORM's migrations table records (none when the table does not exist). */
async function recordedMigrations(dataSource: DataSource, migrationsTable: string): Promise<Set<string>> {
  const driverOptions = dataSource.driver.options as { schema?: string; database?: string };
  const tablePath = dataSource.driver.buildTableName(migrationsTable, driverOptions.schema, driverOptions.database);
  const queryRunner = dataSource.createQueryRunner();
  try {
    if (!(await queryRunner.hasTable(tablePath))) return new Set();
    const rows: { name: string }[] = await queryRunner.manager
      .createQueryBuilder()
      .select(queryRunner.connection.driver.escape('name'), 'name')
      .from(tablePath, 'queuebox_migrations')
      .getRawMany();
    return new Set(rows.map((row) => row.name));
  } finally {
    await queryRunner.release();
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
