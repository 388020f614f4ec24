import type { MigrationInterface, QueryRunner } from 'typeorm';
import { partitionedLayoutStatements, schemaStatements } from '../dialects/drivers';
import { DEFAULT_MIGRATION_NAMES, SCHEMA_MIGRATIONS, type SchemaMigration } from '../dialects/schema-migrations';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { resolveTables } from '../options/options.resolver';
import { messages } from '../texts/queuebox.messages';
import type { QueueBoxModuleOptions } from '../types/options';

/** Marks QueueBox's migration instances, so the start-up check finds the names an app gave them. */
export const QUEUEBOX_MIGRATION = Symbol.for('queuebox.migration');

/** What the mark says: which migration, for which tables. */
export interface QueueBoxMigrationMark {
  migration: SchemaMigration;
  outbox: string;
  inbox: string;
}

/**
 * A TypeORM migration class that creates the outbox and inbox tables (and indexes) for the
 * DataSource's dialect. Pass the same `tables` as to `QueueBoxModule.forRoot()`; give each
 * QueueBox schema in one database its own `name` (it must end in a 13-digit timestamp).
 *
 * @example
 * TypeOrmModule.forRoot({ ..., migrations: [createQueueBoxMigration({ tables: { outbox: 'messaging.outbox', inbox: 'messaging.inbox' } })], migrationsRun: true })
 */
export function createQueueBoxMigration(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string } = {},
): new () => MigrationInterface {
  return migrationClass(options, DEFAULT_MIGRATION_NAMES.schema, 'schema');
}

/**
 * The second QueueBox migration: partial (filtered, on SQL Server) indexes on finished and dead
 * rows, used by retention and by `QueueBoxAdmin` (docs/operations.md). Add it after the first;
 * same `tables`, and a `name` of its own per QueueBox schema in one database.
 *
 * @example
 * migrations: [QueueBoxSchema1764460800000, QueueBoxOperations1764633600000]
 */
export function createQueueBoxOperationsMigration(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string } = {},
): new () => MigrationInterface {
  return migrationClass(options, DEFAULT_MIGRATION_NAMES.operations, 'operations');
}

/**
 * The third QueueBox migration: partial (filtered, on SQL Server) indexes on pending rows without
 * a key or aggregate, so a claim finds them quickly when the oldest pending rows belong to keys in
 * flight, and on PostgreSQL the claims as PL/pgSQL functions, whose plans the session keeps
 * (docs/schema.md). Add it after the second; same `tables`, and a `name` of its own per QueueBox
 * schema in one database. Without it claims stay correct, planned on every call and slower behind
 * busy keys.
 *
 * @example
 * migrations: [QueueBoxSchema1764460800000, QueueBoxOperations1764633600000, QueueBoxClaims1795996800000]
 */
export function createQueueBoxClaimsMigration(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string } = {},
): new () => MigrationInterface {
  return migrationClass(options, DEFAULT_MIGRATION_NAMES.claims, 'claims');
}

/**
 * The fourth QueueBox migration: on SQL Server, the text columns that claims, the inbox dedupe and
 * admin filters compare (`destination`, `key`, `source`, `idempotency_key`, `aggregate_id`) move
 * to the binary collation `Latin1_General_100_BIN2`, so `evt_A` and `evt_a` are two keys (the
 * database's default collation is usually case-insensitive). It rebuilds the indexes on those
 * columns. On PostgreSQL it runs nothing (text already compares byte-wise); it exists so both
 * dialects number the same migrations. Add it after the third; same `tables`, and a `name` of its
 * own per QueueBox schema in one database.
 *
 * @example
 * migrations: [QueueBoxSchema1764460800000, QueueBoxOperations1764633600000, QueueBoxClaims1795996800000, QueueBoxKeyCollation1796083200000]
 */
export function createQueueBoxKeyCollationMigration(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string } = {},
): new () => MigrationInterface {
  return migrationClass(options, DEFAULT_MIGRATION_NAMES.keyCollation, 'keyCollation');
}

/**
 * The fifth QueueBox migration. The version that shipped it replaced migration 003's PostgreSQL
 * claim functions here; this version's functions come with the sixth (their claims record the
 * claiming instance), so it runs nothing on either database. Kept so a database that ran it and
 * one that did not are numbered alike. Add it after the fourth.
 *
 * @example
 * migrations: [...QueueBoxMigrations]
 */
export function createQueueBoxClaimFunctionsMigration(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string } = {},
): new () => MigrationInterface {
  return migrationClass(options, DEFAULT_MIGRATION_NAMES.claimFunctions, 'claimFunctions');
}

/**
 * The sixth QueueBox migration: the instances table (each QueueBox process registers itself and
 * heartbeats, so a live replica ends a dead one's leases in seconds), the claim owner column
 * `claimed_by` on both tables, and on PostgreSQL this version's claim functions (which write it;
 * an older version's are dropped). QueueBox does not start without it. Add it after the fifth;
 * same `tables`, and a `name` of its own per QueueBox schema in one database.
 *
 * @example
 * migrations: [...QueueBoxMigrations]
 */
export function createQueueBoxInstancesMigration(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string } = {},
): new () => MigrationInterface {
  return migrationClass(options, DEFAULT_MIGRATION_NAMES.instances, 'instances');
}

/**
 * The seventh QueueBox migration: on PostgreSQL it rewrites the claim functions with this
 * version's claims, whose head probes (is there an earlier unfinished row of the key?) only the
 * key and aggregate indexes can serve, whatever the statistics say (an earlier probe could walk
 * every finished row of the table on each claim after a VACUUM). Until it runs, QueueBox sees that
 * the functions are an earlier version's and sends the claim statements instead, with a warning.
 * On SQL Server it runs nothing. Add it after the sixth; same `tables`, and a `name` of its own per
 * QueueBox schema in one database.
 *
 * @example
 * migrations: [...QueueBoxMigrations]
 */
export function createQueueBoxClaimProbesMigration(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string } = {},
): new () => MigrationInterface {
  return migrationClass(options, DEFAULT_MIGRATION_NAMES.claimProbes, 'claimProbes');
}

/**
 * The eighth QueueBox migration: the table of the rate limit buckets (`<outbox>_rate_limits`,
 * beside the outbox), one row per destination of `outbox.rateLimits`. Needed only with rate
 * limits (QueueBox refuses to start with them until it ran; without them a missing 008 is a
 * warning). Add it after the seventh; same `tables`, and a `name` of its own per QueueBox schema.
 *
 * @example
 * migrations: [...QueueBoxMigrations]
 */
export function createQueueBoxRateLimitsMigration(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string } = {},
): new () => MigrationInterface {
  return migrationClass(options, DEFAULT_MIGRATION_NAMES.rateLimits, 'rateLimits');
}

/**
 * The ninth QueueBox migration: `renewed_at` on both tables (when a renewal last moved a lease,
 * so another replica's sweep ends only leases not renewed within `deadAfterMs`) and `beats` on the
 * instances table (so two live processes with one instance id find out). QueueBox does not start
 * without it. Add it after the eighth; same `tables`, and a `name` of its own per QueueBox schema
 * in one database.
 *
 * @example
 * migrations: [...QueueBoxMigrations]
 */
export function createQueueBoxRenewalsMigration(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string } = {},
): new () => MigrationInterface {
  return migrationClass(options, DEFAULT_MIGRATION_NAMES.renewals, 'renewals');
}

/**
 * The tenth QueueBox migration: the table of paused destinations and sources (`<outbox>_pauses`),
 * which every replica's workers read once per poll interval to skip what an operator paused
 * (`QueueBoxAdmin.pause`, `queuebox pause`, the dashboard). QueueBox does not start without it.
 * Add it after the ninth; same `tables`, and a `name` of its own per QueueBox schema in one database.
 *
 * @example
 * migrations: [...QueueBoxMigrations]
 */
export function createQueueBoxPausesMigration(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string } = {},
): new () => MigrationInterface {
  return migrationClass(options, DEFAULT_MIGRATION_NAMES.pauses, 'pauses');
}

/**
 * The eleventh QueueBox migration: the attempt history tables (`<outbox>_attempts`,
 * `<inbox>_attempts`: each failed attempt's time, duration, instance, error class and message,
 * the last `attemptHistory` per row) and `fingerprint` on both tables (what groups dead letters by
 * cause). QueueBox does not start without it. Add it after the tenth; same `tables`, and a `name`
 * of its own per QueueBox schema in one database.
 *
 * @example
 * migrations: [...QueueBoxMigrations]
 */
export function createQueueBoxAttemptsMigration(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string } = {},
): new () => MigrationInterface {
  return migrationClass(options, DEFAULT_MIGRATION_NAMES.attempts, 'attempts');
}

/**
 * The twelfth QueueBox migration, PostgreSQL only (nothing on SQL Server): the claim functions
 * rewritten so that claims of rows without a key (an aggregate) run without the claim lock while no
 * keyed row is unfinished, side by side across connections and replicas. Without it QueueBox sends
 * the claim statements itself, one at a time, and warns once. Add it after the eleventh; same
 * `tables`, and a `name` of its own per QueueBox schema in one database.
 *
 * @example
 * migrations: [...QueueBoxMigrations]
 */
export function createQueueBoxUnkeyedClaimsMigration(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string } = {},
): new () => MigrationInterface {
  return migrationClass(options, DEFAULT_MIGRATION_NAMES.unkeyedClaims, 'unkeyedClaims');
}

/**
 * The thirteenth QueueBox migration, PostgreSQL only (nothing on SQL Server): the claim functions
 * rewritten so that claims of rows with a key (an aggregate) take the claim lock shared and lock
 * the keys of the heads they find, so claims of different keys run side by side across
 * connections and replicas. Without it QueueBox sends the claim statements itself, one at a time,
 * and warns once. Add it after the twelfth; same `tables`, and a `name` of its own per QueueBox
 * schema in one database.
 *
 * @example
 * migrations: [...QueueBoxMigrations]
 */
export function createQueueBoxKeyedClaimsMigration(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string } = {},
): new () => MigrationInterface {
  return migrationClass(options, DEFAULT_MIGRATION_NAMES.keyedClaims, 'keyedClaims');
}

/**
 * The fourteenth QueueBox migration, PostgreSQL only (nothing on SQL Server): the claim functions
 * set to plan with their indexes (`enable_seqscan = off` for their calls), so a session whose first
 * claim found the table empty or never analyzed does not read the whole table at every later
 * claim. Claims are correct without it. Add it after the thirteenth; same `tables`, and a `name`
 * of its own per QueueBox schema in one database.
 *
 * @example
 * migrations: [...QueueBoxMigrations]
 */
export function createQueueBoxClaimPlansMigration(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string } = {},
): new () => MigrationInterface {
  return migrationClass(options, DEFAULT_MIGRATION_NAMES.claimPlans, 'claimPlans');
}

/**
 * Every QueueBox migration for `tables`, in the order they run: spread it into TypeORM's
 * `migrations`, so a version that adds one needs no change in your app. `names` gives each a
 * name of its own (a second QueueBox schema in one database; each must end in a 13-digit
 * timestamp).
 *
 * @example
 * TypeOrmModule.forRoot({ ..., migrations: [...createQueueBoxMigrations({ tables: { outbox: 'ledger.outbox', inbox: 'ledger.inbox' } })] })
 */
export function createQueueBoxMigrations(
  options: { tables?: QueueBoxModuleOptions['tables']; names?: Partial<Record<SchemaMigration, string>> } = {},
): (new () => MigrationInterface)[] {
  return SCHEMA_MIGRATIONS.map((migration) =>
    migrationClass({ tables: options.tables, name: options.names?.[migration] }, DEFAULT_MIGRATION_NAMES[migration], migration),
  );
}

/**
 * The partitioned layout (PostgreSQL; docs/partitioning.md): the outbox and inbox made again as
 * tables partitioned by id range, with side tables that keep a message id and an inbox dedupe key
 * unique across partitions, and their first two partitions. Add it after every numbered QueueBox
 * migration, on empty tables (it refuses tables with rows: moving them is not built yet); same
 * `tables`, and a `name` of its own per QueueBox schema in one database. Its `down` makes the
 * tables plain again, empty.
 *
 * @example
 * migrations: [...QueueBoxMigrations, createQueueBoxPartitionedLayoutMigration()]
 */
export function createQueueBoxPartitionedLayoutMigration(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string } = {},
): new () => MigrationInterface {
  const tables = resolveTables(options.tables);
  const name = checkedName(options.name ?? PARTITIONED_LAYOUT_MIGRATION_NAME);
  const run = async (queryRunner: QueryRunner, direction: 'up' | 'down') => {
    const type = queryRunner.connection.options.type;
    const statements = partitionedLayoutStatements(type, tables, direction);
    if (!statements) throw new QueueBoxConfigError('migrations', messages.partitionedLayoutUnsupported(String(type)));
    for (const statement of statements) await queryRunner.query(statement);
  };
  return class QueueBoxPartitionedLayoutMigration implements MigrationInterface {
    readonly name = name;
    async up(queryRunner: QueryRunner): Promise<void> {
      await run(queryRunner, 'up');
    }
    async down(queryRunner: QueryRunner): Promise<void> {
      await run(queryRunner, 'down');
    }
  };
}

/** The partitioned layout migration's name for the default table names. */
export const PARTITIONED_LAYOUT_MIGRATION_NAME = 'QueueBoxPartitionedLayout1797033600000';

function checkedName(name: string): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]*\d{13}$/.test(name)) throw new QueueBoxConfigError('name', messages.migrationNameInvalid(name));
  return name;
}

function migrationClass(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string },
  defaultName: string,
  migration: SchemaMigration,
): new () => MigrationInterface {
  const tables = resolveTables(options.tables);
  const name = checkedName(options.name ?? defaultName);
  const run = async (queryRunner: QueryRunner, direction: 'up' | 'down') => {
    for (const statement of schemaStatements(queryRunner.connection.options.type, tables, direction, migration)) {
      await queryRunner.query(statement);
    }
  };
  const mark: QueueBoxMigrationMark = { migration, outbox: tables.outbox.qualified, inbox: tables.inbox.qualified };
  return class QueueBoxSchemaMigration implements MigrationInterface {
    readonly name = name;
    readonly [QUEUEBOX_MIGRATION] = mark;
    async up(queryRunner: QueryRunner): Promise<void> {
      await run(queryRunner, 'up');
    }
    async down(queryRunner: QueryRunner): Promise<void> {
      await run(queryRunner, 'down');
    }
  };
}

/** The migration for the default table names (`queuebox_outbox`, `queuebox_inbox`). */
export const QueueBoxSchema1764460800000 = createQueueBoxMigration();

/** The operations migration for the default table names; runs after `QueueBoxSchema1764460800000`. */
export const QueueBoxOperations1764633600000 = createQueueBoxOperationsMigration();

/** The claim-indexes migration for the default table names; runs after `QueueBoxOperations1764633600000`. */
export const QueueBoxClaims1795996800000 = createQueueBoxClaimsMigration();

/** The key-collation migration for the default table names; runs after `QueueBoxClaims1795996800000`. */
export const QueueBoxKeyCollation1796083200000 = createQueueBoxKeyCollationMigration();

/** The claim-functions migration for the default table names (runs nothing now); runs after `QueueBoxKeyCollation1796083200000`. */
export const QueueBoxClaimFunctions1796169600000 = createQueueBoxClaimFunctionsMigration();

/** The instances migration for the default table names; runs after `QueueBoxClaimFunctions1796169600000`. */
export const QueueBoxInstances1796256000000 = createQueueBoxInstancesMigration();

/** The claim-probes migration for the default table names; runs after `QueueBoxInstances1796256000000`. */
export const QueueBoxClaimProbes1796342400000 = createQueueBoxClaimProbesMigration();

/** The rate-limits migration for the default table names; runs after `QueueBoxClaimProbes1796342400000`. */
export const QueueBoxRateLimits1796428800000 = createQueueBoxRateLimitsMigration();

/** The renewals migration for the default table names; runs after `QueueBoxRateLimits1796428800000`. */
export const QueueBoxRenewals1796515200000 = createQueueBoxRenewalsMigration();

/** The pauses migration for the default table names; runs after `QueueBoxRenewals1796515200000`. */
export const QueueBoxPauses1796601600000 = createQueueBoxPausesMigration();

/** The attempts migration for the default table names; runs after `QueueBoxPauses1796601600000`. */
export const QueueBoxAttempts1796688000000 = createQueueBoxAttemptsMigration();

/** The unkeyed-claims migration for the default table names; runs after `QueueBoxAttempts1796688000000`. */
export const QueueBoxUnkeyedClaims1796774400000 = createQueueBoxUnkeyedClaimsMigration();

/** The keyed-claims migration for the default table names; runs after `QueueBoxUnkeyedClaims1796774400000`. */
export const QueueBoxKeyedClaims1796860800000 = createQueueBoxKeyedClaimsMigration();

/** The claim-plans migration for the default table names; runs after `QueueBoxKeyedClaims1796860800000`. */
export const QueueBoxClaimPlans1796947200000 = createQueueBoxClaimPlansMigration();

/**
 * Every QueueBox migration for the default table names, in order: `migrations: [...QueueBoxMigrations]`.
 * With other tables, use `createQueueBoxMigrations({ tables })`.
 */
export const QueueBoxMigrations: readonly (new () => MigrationInterface)[] = [
  QueueBoxSchema1764460800000,
  QueueBoxOperations1764633600000,
  QueueBoxClaims1795996800000,
  QueueBoxKeyCollation1796083200000,
  QueueBoxClaimFunctions1796169600000,
  QueueBoxInstances1796256000000,
  QueueBoxClaimProbes1796342400000,
  QueueBoxRateLimits1796428800000,
  QueueBoxRenewals1796515200000,
  QueueBoxPauses1796601600000,
  QueueBoxAttempts1796688000000,
  QueueBoxUnkeyedClaims1796774400000,
  QueueBoxKeyedClaims1796860800000,
  QueueBoxClaimPlans1796947200000,
];
