import type { DataSource } from 'typeorm';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { messages } from '../queuebox.messages';
import type { Dialect, DialectSettings, QueueBoxTables } from './dialect';
import { PostgresDialect } from './postgres/postgres.dialect';
import {
  postgresClaimsDown,
  postgresClaimsUp,
  postgresKeyCollationDown,
  postgresKeyCollationUp,
  postgresOperationsDown,
  postgresOperationsUp,
  postgresSchemaDown,
  postgresSchemaUp,
} from './postgres/postgres.schema';
import { SqlServerDialect } from './sqlserver/sqlserver.dialect';
import {
  sqlServerClaimsDown,
  sqlServerClaimsUp,
  sqlServerKeyCollationDown,
  sqlServerKeyCollationUp,
  sqlServerOperationsDown,
  sqlServerOperationsUp,
  sqlServerSchemaDown,
  sqlServerSchemaUp,
} from './sqlserver/sqlserver.schema';

export type DialectType = Dialect['type'];

type Statements = { up: (t: QueueBoxTables) => string[]; down: (t: QueueBoxTables) => string[] };

/**
 * Which migration's statements: 001 (the tables), 002 (the operations indexes), 003 (the claims'
 * indexes and functions) or 004 (binary collation of the compared key columns; none on PostgreSQL).
 */
export type SchemaMigration = 'schema' | 'operations' | 'claims' | 'keyCollation';

/** The QueueBox migrations in the order they run. */
export const SCHEMA_MIGRATIONS: readonly SchemaMigration[] = ['schema', 'operations', 'claims', 'keyCollation'];

const migrations: Record<SchemaMigration, Record<DialectType, Statements>> = {
  schema: {
    postgres: { up: postgresSchemaUp, down: postgresSchemaDown },
    mssql: { up: sqlServerSchemaUp, down: sqlServerSchemaDown },
  },
  /** Migration 002: the indexes of the admin and retention (partial / filtered, on finished and dead rows). */
  operations: {
    postgres: { up: postgresOperationsUp, down: postgresOperationsDown },
    mssql: { up: sqlServerOperationsUp, down: sqlServerOperationsDown },
  },
  /** Migration 003: the claims' indexes of pending rows without a key or aggregate, and (PostgreSQL) their PL/pgSQL functions. */
  claims: {
    postgres: { up: postgresClaimsUp, down: postgresClaimsDown },
    mssql: { up: sqlServerClaimsUp, down: sqlServerClaimsDown },
  },
  /** Migration 004: key columns compared by code point (SQL Server: BIN2 collation; PostgreSQL already does, so no statements). */
  keyCollation: {
    postgres: { up: postgresKeyCollationUp, down: postgresKeyCollationDown },
    mssql: { up: sqlServerKeyCollationUp, down: sqlServerKeyCollationDown },
  },
};

function supported(type: unknown): DialectType {
  if (type === 'postgres' || type === 'mssql') return type;
  throw new QueueBoxConfigError('dataSource', messages.dialectNotSupported(type));
}

/** The dialect for a TypeORM DataSource, chosen by its driver type. */
export function createDialect(dataSource: DataSource, tables: QueueBoxTables, settings?: DialectSettings): Dialect {
  return supported(dataSource.options.type) === 'mssql'
    ? new SqlServerDialect(dataSource, tables)
    : new PostgresDialect(dataSource, tables, settings);
}

/** The schema DDL of a dialect, one statement per entry. */
export function schemaStatements(
  type: unknown,
  tables: QueueBoxTables,
  direction: 'up' | 'down',
  migration: SchemaMigration = 'schema',
): string[] {
  return migrations[migration][supported(type)][direction](tables);
}
