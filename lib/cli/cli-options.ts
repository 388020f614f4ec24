import type { MigrationInterface } from 'typeorm';
import type { QueueBoxTables } from '../dialects/dialect';
import { dialectDriver, type MigrationNotes } from '../dialects/drivers';
import { DEFAULT_MIGRATION_NAMES, type SchemaMigration } from '../dialects/schema-migrations';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { createQueueBoxMigrations } from '../migrations/queuebox.migration';
import { resolveTables } from '../options/options.resolver';
import { CliUsageError } from './cli.errors';
import { cliMessages } from './cli.messages';
import { type DatabaseTarget, parseDatabaseUrl } from './database-url';

/** `--tables outbox=<table>,inbox=<table>` (either may be left out), validated like the module's `tables` option. */
export function parseTables(value: string | undefined): QueueBoxTables {
  const tables: { outbox?: string; inbox?: string; instances?: string } = {};
  if (value !== undefined) {
    for (const part of value.split(',')) {
      const match = /^\s*(outbox|inbox|instances)\s*=\s*(\S+?)\s*$/.exec(part);
      if (!match) throw new CliUsageError(cliMessages.tablesInvalid(value));
      tables[match[1] as 'outbox' | 'inbox' | 'instances'] = match[2];
    }
  }
  try {
    return resolveTables(tables);
  } catch (error) {
    if (error instanceof QueueBoxConfigError) throw new CliUsageError(`--tables: ${error.message}`);
    throw error;
  }
}

/** `--url`, else `QUEUEBOX_DATABASE_URL`, else `DATABASE_URL`. */
export function databaseTarget(url: string | undefined, env: NodeJS.ProcessEnv): DatabaseTarget {
  const raw = url ?? env.QUEUEBOX_DATABASE_URL ?? env.DATABASE_URL;
  if (raw === undefined || raw === '') throw new CliUsageError(cliMessages.urlMissing());
  return parseDatabaseUrl(raw);
}

/** `"queuebox_outbox" and "queuebox_inbox"`, as users named them. */
export function describeTables(tables: QueueBoxTables): string {
  return `"${tables.outbox.qualified}" and "${tables.inbox.qualified}"`;
}

export interface QueueBoxMigrations {
  /** Each migration's name: the schema migration's is `--migration-name` (default the shipped one), the others' the shipped ones. */
  names: Record<SchemaMigration, string>;
  /** The classes, in the order they run. */
  classes: (new () => MigrationInterface)[];
}

/** The `tables` option that names `tables` (what `--tables` gave, with the defaults filled in). */
export function namedTables(tables: QueueBoxTables): { outbox: string; inbox: string; instances: string } {
  return { outbox: tables.outbox.qualified, inbox: tables.inbox.qualified, instances: tables.instances.qualified };
}

/** The QueueBox migrations for `tables`, the schema migration named `name`. */
export function migrationsFor(tables: QueueBoxTables, name: string = DEFAULT_MIGRATION_NAMES.schema): QueueBoxMigrations {
  const named = namedTables(tables);
  try {
    return {
      names: { ...DEFAULT_MIGRATION_NAMES, schema: name },
      classes: createQueueBoxMigrations({ tables: named, names: { schema: name } }),
    };
  } catch (error) {
    if (error instanceof QueueBoxConfigError) throw new CliUsageError(`--migration-name: ${error.message}`);
    throw error;
  }
}

/** What the CLI says of `migration` on the database of driver `type`. */
export function migrationNotes(type: string, migration: SchemaMigration): MigrationNotes {
  return dialectDriver(type).migrationNotes[migration] ?? cliMessages.migrationNotes[migration];
}
