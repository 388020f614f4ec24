import type { TableName } from '../../common/identifiers';

// Quoting for SQL Server: table names, validated once (lib/common/identifiers), in brackets. Values always go as typed parameters (sqlserver.params.ts).

/** Quotes a validated table name for SQL Server: `[schema].[name]`, or `[name]` (the user's default schema). */
export function mssqlTable(table: TableName): string {
  return table.schema ? `[${table.schema}].[${table.name}]` : `[${table.name}]`;
}
