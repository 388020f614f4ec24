import type { TableName } from '../common/identifiers';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';
import type { QueueBoxTables } from './dialect';
import type { DialectDriver } from './dialect-driver';
import type { InspectionQuery } from './inspection.sql';
import { postgresDriver } from './postgres/driver';
import type { SchemaMigration } from './schema-migrations';
import { sqlServerDriver } from './sqlserver/driver';

export type { DialectDriver, DialectLog, MigrationNotes, UrlConnection, UrlProblems, VerifyQueries } from './dialect-driver';

const ENTRIES = [postgresDriver, sqlServerDriver] as const;

/** TypeORM driver types QueueBox supports. */
export type DialectType = (typeof ENTRIES)[number]['type'];

/** The dialect drivers: one entry per supported database. */
const DRIVERS: readonly DialectDriver<DialectType>[] = ENTRIES;

/** The supported TypeORM driver types, in the order of this list. */
export const DIALECT_TYPES: readonly DialectType[] = DRIVERS.map((driver) => driver.type);

export function isDialectType(type: unknown): type is DialectType {
  return DIALECT_TYPES.includes(type as DialectType);
}

/** The driver of a TypeORM driver type; throws `QueueBoxConfigError` for an unsupported one. */
export function dialectDriver(type: unknown): DialectDriver<DialectType> {
  const driver = DRIVERS.find((d) => d.type === type);
  if (!driver) throw new QueueBoxConfigError('dataSource', messages.dialectNotSupported(type, DRIVERS));
  return driver;
}

/** The driver whose URL scheme this is, if any. */
export function dialectDriverForScheme(scheme: string): DialectDriver<DialectType> | undefined {
  return DRIVERS.find((d) => d.urlSchemes.includes(scheme));
}

/** The schema DDL of a dialect, one statement per entry. */
export function schemaStatements(
  type: unknown,
  tables: QueueBoxTables,
  direction: 'up' | 'down',
  migration: SchemaMigration = 'schema',
): string[] {
  return dialectDriver(type).migrations[migration][direction](tables);
}

/**
 * The partitioned layout's statements (issue 37) for the DataSource's database; `undefined` where
 * the database has no partitioned layout (SQL Server, for now).
 */
export function partitionedLayoutStatements(type: unknown, tables: QueueBoxTables, direction: 'up' | 'down'): string[] | undefined {
  return dialectDriver(type).partitionedLayout?.[direction](tables);
}

/** All drivers, for what covers every database (`npm run sql`, tests). */
export function dialectDrivers(): readonly DialectDriver<DialectType>[] {
  return DRIVERS;
}

/**
 * Sent outbox rows per destination and processed inbox rows per source: what `queuebox status`
 * adds to `QueueBoxAdmin.backlog()`, which counts unfinished and dead rows only.
 */
export function finishedCountQuery(type: string, tables: QueueBoxTables): InspectionQuery {
  return dialectDriver(type).inspection.finishedCount(tables);
}

/** State, attempts and last error of the rows with these ids (bigints as strings). */
export function rowStatesQuery(type: string, table: TableName, ids: readonly string[]): InspectionQuery {
  return dialectDriver(type).inspection.rowStates(table, ids);
}
