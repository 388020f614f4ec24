import type { TableName } from '../../common/identifiers';

// Quoting for SQL Server: table names, validated once (lib/common/identifiers), in brackets. Values always go as typed parameters (sqlserver.params.ts).

/** Quotes a validated table name for SQL Server: `[schema].[name]`, or `[name]` (the user's default schema). */
export function mssqlTable(table: TableName): string {
  return table.schema ? `[${table.schema}].[${table.name}]` : `[${table.name}]`;
}

/**
 * The index `suffix` of `table` (as mssqlTable quotes it: `[schema].[name]` or `[name]`), as the
 * migrations name it: `[<name>_<suffix>]` (for a table hint such as `INDEX ([<name>_pkey])`).
 */
export function indexOf(table: string, suffix: string): string {
  const name = /\[([^\]]+)\]$/.exec(table)?.[1];
  if (!name) throw new Error(`not a bracket-quoted table name: ${table}`);
  return `[${name}_${suffix}]`;
}
