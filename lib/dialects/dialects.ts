import type { DataSource } from 'typeorm';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { messages } from '../queuebox.messages';
import type { Dialect, QueueBoxTables } from './dialect';
import { PostgresDialect } from './postgres/postgres.dialect';
import { postgresOperationsDown, postgresOperationsUp, postgresSchemaDown, postgresSchemaUp } from './postgres/postgres.schema';
import { SqlServerDialect } from './sqlserver/sqlserver.dialect';
import { sqlServerOperationsDown, sqlServerOperationsUp, sqlServerSchemaDown, sqlServerSchemaUp } from './sqlserver/sqlserver.schema';

export type DialectType = Dialect['type'];

const schemas: Record<DialectType, { up: (t: QueueBoxTables) => string[]; down: (t: QueueBoxTables) => string[] }> = {
  postgres: { up: postgresSchemaUp, down: postgresSchemaDown },
  mssql: { up: sqlServerSchemaUp, down: sqlServerSchemaDown },
};

/** Migration 002: the indexes of the admin and retention (partial / filtered, on finished and dead rows). */
const operations: typeof schemas = {
  postgres: { up: postgresOperationsUp, down: postgresOperationsDown },
  mssql: { up: sqlServerOperationsUp, down: sqlServerOperationsDown },
};

/** Which migration's statements: 001 (the tables) or 002 (the operations indexes). */
export type SchemaMigration = 'schema' | 'operations';

function supported(type: unknown): DialectType {
  if (type === 'postgres' || type === 'mssql') return type;
  throw new QueueBoxConfigError('dataSource', messages.dialectNotSupported(type));
}

/** The dialect for a TypeORM DataSource, chosen by its driver type. */
export function createDialect(dataSource: DataSource, tables: QueueBoxTables): Dialect {
  return supported(dataSource.options.type) === 'mssql'
    ? new SqlServerDialect(dataSource, tables)
    : new PostgresDialect(dataSource, tables);
}

/** The schema DDL of a dialect, one statement per entry. */
export function schemaStatements(
  type: unknown,
  tables: QueueBoxTables,
  direction: 'up' | 'down',
  migration: SchemaMigration = 'schema',
): string[] {
  return (migration === 'schema' ? schemas : operations)[supported(type)][direction](tables);
}
