import type { DataSource } from 'typeorm';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { messages } from '../queuebox.messages';
import type { Dialect, QueueBoxTables } from './dialect';
import { PostgresDialect } from './postgres/postgres.dialect';
import { postgresSchemaDown, postgresSchemaUp } from './postgres/postgres.schema';

export type DialectType = Dialect['type'];

const schemas: Partial<Record<DialectType, { up: (t: QueueBoxTables) => string[]; down: (t: QueueBoxTables) => string[] }>> = {
  postgres: { up: postgresSchemaUp, down: postgresSchemaDown },
};

function supported(type: unknown): DialectType {
  if (type === 'postgres') return type;
  throw new QueueBoxConfigError('dataSource', messages.dialectUnsupported(type));
}

/** The dialect for a TypeORM DataSource, chosen by its driver type. */
export function createDialect(dataSource: DataSource, tables: QueueBoxTables): Dialect {
  supported(dataSource.options.type);
  return new PostgresDialect(dataSource, tables);
}

/** The schema DDL of a dialect, one statement per entry. */
export function schemaStatements(type: unknown, tables: QueueBoxTables, direction: 'up' | 'down'): string[] {
  const schema = schemas[supported(type)];
  if (!schema) throw new QueueBoxConfigError('dataSource', messages.dialectUnsupported(type));
  return schema[direction](tables);
}
