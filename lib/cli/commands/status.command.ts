import { MigrationExecutor } from 'typeorm';
import { createQueueBoxAdmin } from '../../admin/create-queuebox-admin';
import { SCHEMA_MIGRATIONS, type SchemaMigration } from '../../dialects/schema-migrations';
import { type BacklogEntry, readBacklog } from '../backlog';
import { CliFailure } from '../cli.errors';
import { cliMessages } from '../cli.messages';
import { databaseTarget, describeTables, migrationNotes, migrationsFor, namedTables, parseTables } from '../cli-options';
import { type Command, DATABASE_OPTIONS_HELP, DEFAULT_MIGRATIONS_TABLE, databaseOptions } from '../command';
import { openDataSource, tablesPresent } from '../connect';
import { formatPauses } from './pauses.command';

export const statusCommand: Command = {
  name: 'status',
  summary: 'Show the schema state and the backlog per destination and source',
  help: `Usage: queuebox status [--url <url>] [--tables outbox=<table>,inbox=<table>] [--json] [options]

Prints whether the QueueBox tables exist and whether its TypeORM migration is recorded, then, per
outbox destination and per inbox source, how many rows are pending, processing, sent/processed and
dead, and the age of the oldest pending row (by the database clock), then the paused destinations
and sources (once migration 010 ran). Reads only; counting every row scans both tables once. Exits with 1 and "schema missing" when a table does not exist.

Options:
${DATABASE_OPTIONS_HELP}
  --json                      Print one JSON object instead of text
  -h, --help                  Show this help`,
  options: { ...databaseOptions, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
  async run(values, io) {
    const target = databaseTarget(values.url as string | undefined, io.env);
    const tables = parseTables(values.tables as string | undefined);
    const migrations = migrationsFor(tables, values['migration-name'] as string | undefined);
    const migrationsTable = (values['migrations-table'] as string | undefined) ?? DEFAULT_MIGRATIONS_TABLE;
    const json = values.json === true;
    const dataSource = await openDataSource(target, migrations.classes, migrationsTable);
    try {
      const present = await tablesPresent(dataSource, tables);
      const pending = (await new MigrationExecutor(dataSource).getPendingMigrations()).map((migration) => migration.name);
      const isApplied = (migration: SchemaMigration) => !pending.includes(migrations.names[migration]);
      const applied = isApplied('schema');
      const later = SCHEMA_MIGRATIONS.filter((migration) => migration !== 'schema');
      const complete = present.outbox && present.inbox;
      // The admin needs the instances table (migration 006); the schema state is worth printing without it.
      const admin = complete && present.instances ? await createQueueBoxAdmin(dataSource, { tables: namedTables(tables) }) : undefined;
      const backlog = admin ? await readBacklog(admin, dataSource, tables) : [];
      // The pauses table comes with migration 010.
      const pauses = admin && isApplied('pauses') ? await admin.pauses() : undefined;
      if (json) {
        io.out(
          JSON.stringify(
            {
              database: target.masked,
              type: target.type,
              tables: {
                outbox: { name: tables.outbox.qualified, exists: present.outbox },
                inbox: { name: tables.inbox.qualified, exists: present.inbox },
              },
              migration: { name: migrations.names.schema, applied, migrationsTable },
              ...Object.fromEntries(
                later.map((migration) => [`${migration}Migration`, { name: migrations.names[migration], applied: isApplied(migration) }]),
              ),
              backlog,
              ...(pauses ? { pauses } : {}),
            },
            null,
            2,
          ),
        );
      } else {
        io.out(`Database: ${target.masked} (${target.type})`);
        const exists = (name: string, yes: boolean) => `"${name}" ${yes ? 'exists' : 'MISSING'}`;
        io.out(`Tables: ${exists(tables.outbox.qualified, present.outbox)}, ${exists(tables.inbox.qualified, present.inbox)}`);
        io.out(
          `Migration ${migrations.names.schema}: ${applied ? 'applied' : complete ? 'not recorded (tables created some other way, e.g. plain SQL)' : 'not applied'} (TypeORM table "${migrationsTable}")`,
        );
        for (const migration of later) {
          const note = isApplied(migration) ? 'applied' : migrationNotes(target.type, migration).notApplied;
          io.out(`Migration ${migrations.names[migration]}: ${note}`);
        }
        if (complete && present.instances) for (const line of formatBacklog(backlog)) io.out(line);
        else if (complete) io.out(cliMessages.backlogNeedsInstances(tables.instances.qualified));
        if (pauses) for (const line of ['', ...formatPauses(pauses)]) io.out(line);
      }
      if (!complete) throw new CliFailure(cliMessages.schemaMissing(describeTables(tables)));
      return 0;
    } finally {
      await dataSource.destroy();
    }
  },
};

/** The backlog as two aligned tables, outbox then inbox. */
export function formatBacklog(backlog: BacklogEntry[]): string[] {
  const lines: string[] = [];
  for (const component of ['outbox', 'inbox'] as const) {
    const entries = backlog.filter((entry) => entry.component === component);
    lines.push('');
    if (entries.length === 0) {
      lines.push(`${component === 'outbox' ? 'Outbox' : 'Inbox'}: empty`);
      continue;
    }
    const header = [
      component === 'outbox' ? 'destination' : 'source',
      'pending',
      'processing',
      component === 'outbox' ? 'sent' : 'processed',
      'dead',
      'oldest pending',
    ];
    const rows = entries.map((e) => [
      e.name,
      String(e.pending),
      String(e.processing),
      String(e.done),
      String(e.dead),
      formatAge(e.oldestPendingAgeSeconds),
    ]);
    const widths = header.map((title, i) => Math.max(title.length, ...rows.map((row) => row[i].length)));
    const format = (row: string[]) => row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]) : cell.padStart(widths[i]))).join('  ');
    lines.push(`${component === 'outbox' ? 'Outbox' : 'Inbox'}:`, `  ${format(header)}`, ...rows.map((row) => `  ${format(row)}`));
  }
  return lines;
}

/** `-`, `42s`, `3m 05s`, `2h 07m`, `3d 04h`. */
export function formatAge(seconds: number | null): string {
  if (seconds === null) return '-';
  const s = Math.floor(seconds);
  const two = (n: number) => String(n).padStart(2, '0');
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${two(s % 60)}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h ${two(Math.floor((s % 3600) / 60))}m`;
  return `${Math.floor(s / 86_400)}d ${two(Math.floor((s % 86_400) / 3600))}h`;
}
