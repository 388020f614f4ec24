import { MigrationExecutor } from 'typeorm';
import { CliFailure } from '../cli.errors';
import { cliMessages } from '../cli.messages';
import { databaseTarget, describeTables, migrationFor, parseTables } from '../cli-options';
import { type Command, DATABASE_OPTIONS_HELP, DEFAULT_MIGRATIONS_TABLE, databaseOptions } from '../command';
import { openDataSource, tablesPresent } from '../connect';

export const migrateCommand: Command = {
  name: 'migrate',
  summary: 'Create the QueueBox tables (runs its TypeORM migration; running it again changes nothing)',
  help: `Usage: queuebox migrate [--url <url>] [--tables outbox=<table>,inbox=<table>] [options]

Creates the outbox and inbox tables and their indexes by running the QueueBox TypeORM migration,
the same one your app can list in TypeORM's "migrations". TypeORM records it in its migrations
table, so a second run is a no-op. Tables that exist without that record (created from plain SQL)
are left alone and reported.

Options:
${DATABASE_OPTIONS_HELP}
  -h, --help                  Show this help`,
  options: { ...databaseOptions, help: { type: 'boolean', short: 'h' } },
  async run(values, io) {
    const target = databaseTarget(values.url as string | undefined, io.env);
    const tables = parseTables(values.tables as string | undefined);
    const migration = migrationFor(tables, values['migration-name'] as string | undefined);
    const migrationsTable = (values['migrations-table'] as string | undefined) ?? DEFAULT_MIGRATIONS_TABLE;
    io.out(`Database: ${target.masked} (${target.type})`);
    const dataSource = await openDataSource(target, migration.class, migrationsTable);
    try {
      const pending = await new MigrationExecutor(dataSource).getPendingMigrations();
      if (pending.length === 0) {
        io.out(`Nothing to do: migration ${migration.name} is already applied (recorded in "${migrationsTable}").`);
        return 0;
      }
      const present = await tablesPresent(dataSource, tables);
      if (present.outbox || present.inbox) {
        throw new CliFailure(cliMessages.schemaUnrecorded(describeTables(tables), migration.name, migrationsTable));
      }
      await dataSource.runMigrations({ transaction: 'all' });
      io.out(`Applied migration ${migration.name}: created tables ${describeTables(tables)} with their indexes.`);
      return 0;
    } finally {
      await dataSource.destroy();
    }
  },
};
