import { DIALECT_TYPES, isDialectType } from '../../dialects/drivers';
import { SCHEMA_MIGRATIONS } from '../../dialects/schema-migrations';
import { renderSchemaSql } from '../../migrations/schema-files';
import { CliUsageError } from '../cli.errors';
import { cliMessages } from '../cli.messages';
import { namedTables, parseTables } from '../cli-options';
import type { Command } from '../command';

export const sqlCommand: Command = {
  name: 'sql',
  summary: 'Print the schema SQL, for your own migration tool',
  help: `Usage: queuebox sql [--dialect postgres|mssql] [--tables outbox=<table>,inbox=<table>] [--down]

Prints the statements the QueueBox migrations run (the schema, the operations indexes, the claims' indexes and functions, the key collation on SQL Server), as one script (SQL Server batches end with GO).
Needs no database. Apply it with your migration tool (Flyway, Liquibase, sqitch, psql, sqlcmd).

Options:
  --dialect <name>   postgres (default) or mssql
  --tables <spec>    outbox=<table>,inbox=<table> (each name or schema.name)
  --down             Print the script that drops the tables instead
  -h, --help         Show this help`,
  options: { dialect: { type: 'string' }, tables: { type: 'string' }, down: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
  async run(values, io) {
    const dialect = (values.dialect as string | undefined) ?? 'postgres';
    if (!isDialectType(dialect)) throw new CliUsageError(cliMessages.dialectUnknown(dialect, DIALECT_TYPES));
    const tables = parseTables(values.tables as string | undefined);
    const direction = values.down === true ? 'down' : 'up';
    // Up: the migrations in order; down: the reverse.
    const order = direction === 'up' ? SCHEMA_MIGRATIONS : [...SCHEMA_MIGRATIONS].reverse();
    const named = namedTables(tables);
    const scripts = order.map((migration) => renderSchemaSql(dialect, { tables: named, direction, migration }).replace(/\n$/, ''));
    io.out(scripts.join('\n\n'));
    return 0;
  },
};
