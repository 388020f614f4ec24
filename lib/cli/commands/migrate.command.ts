import { MigrationExecutor } from 'typeorm';
import { SCHEMA_MIGRATIONS } from '../../dialects/schema-migrations';
import { CliFailure } from '../cli.errors';
import { cliMessages } from '../cli.messages';
import { databaseTarget, describeTables, migrationNotes, migrationsFor, parseTables } from '../cli-options';
import { type Command, DATABASE_OPTIONS_HELP, DEFAULT_MIGRATIONS_TABLE, databaseOptions } from '../command';
import { openDataSource, tablesPresent } from '../connect';
import { forMigrations } from '../database-url';

export const migrateCommand: Command = {
  name: 'migrate',
  summary: 'Create the QueueBox tables and indexes (runs its TypeORM migrations; running them again changes nothing)',
  help: `Usage: queuebox migrate [--url <url>] [--tables outbox=<table>,inbox=<table>] [options]

Creates the outbox and inbox tables and their indexes by running the QueueBox TypeORM migrations,
the same ones your app can list in TypeORM's "migrations": the schema (QueueBoxSchema1764460800000),
the indexes admin and retention use (QueueBoxOperations1764633600000) and the claims' indexes of
rows without a key and, on PostgreSQL, their functions (QueueBoxClaims1795996800000), on SQL
Server the key columns' binary collation (QueueBoxKeyCollation1796083200000; nothing on PostgreSQL),
and the instances table with the claim owner columns (QueueBoxInstances1796169600000; on
PostgreSQL with the claim functions that write them). TypeORM records each in
its migrations table, so a second run is a no-op and an older database gets only what it lacks.
Tables that exist without the schema's record (created from plain SQL) are left alone and reported.

Options:
${DATABASE_OPTIONS_HELP}
  -h, --help                  Show this help`,
  options: { ...databaseOptions, help: { type: 'boolean', short: 'h' } },
  async run(values, io) {
    const target = databaseTarget(values.url as string | undefined, io.env);
    const tables = parseTables(values.tables as string | undefined);
    const migrations = migrationsFor(tables, values['migration-name'] as string | undefined);
    const migrationsTable = (values['migrations-table'] as string | undefined) ?? DEFAULT_MIGRATIONS_TABLE;
    io.out(`Database: ${target.masked} (${target.type})`);
    const dataSource = await openDataSource(forMigrations(target), migrations.classes, migrationsTable);
    try {
      const pending = (await new MigrationExecutor(dataSource).getPendingMigrations()).map((migration) => migration.name);
      if (pending.length === 0) {
        io.out(
          `Nothing to do: migrations ${Object.values(migrations.names).join(', ')} are already applied (recorded in "${migrationsTable}").`,
        );
        return 0;
      }
      if (pending.includes(migrations.names.schema)) {
        const present = await tablesPresent(dataSource, tables);
        if (present.outbox || present.inbox) {
          throw new CliFailure(cliMessages.schemaUnrecorded(describeTables(tables), migrations.names.schema, migrationsTable));
        }
      }
      await dataSource.runMigrations({ transaction: 'all' });
      for (const migration of SCHEMA_MIGRATIONS) {
        const name = migrations.names[migration];
        if (!pending.includes(name)) continue;
        const applied =
          migration === 'schema'
            ? `created tables ${describeTables(tables)} with their indexes.`
            : migrationNotes(target.type, migration).applied;
        io.out(`Applied migration ${name}: ${applied}`);
      }
      return 0;
    } finally {
      await dataSource.destroy();
    }
  },
};
