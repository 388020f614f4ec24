import type { MigrationInterface } from 'typeorm';
import type { QueueBoxTables } from '../dialects/dialect';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { createQueueBoxMigration } from '../migrations/queuebox.migration';
import { resolveTables } from '../queuebox.options';
import { CliUsageError } from './cli.errors';
import { cliMessages } from './cli.messages';
import { type DatabaseTarget, parseDatabaseUrl } from './database-url';

/** `--tables outbox=<table>,inbox=<table>` (either may be left out), validated like the module's `tables` option. */
export function parseTables(value: string | undefined): QueueBoxTables {
  const tables: { outbox?: string; inbox?: string } = {};
  if (value !== undefined) {
    for (const part of value.split(',')) {
      const match = /^\s*(outbox|inbox)\s*=\s*(\S+?)\s*$/.exec(part);
      if (!match) throw new CliUsageError(cliMessages.tablesInvalid(value));
      tables[match[1] as 'outbox' | 'inbox'] = match[2];
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

const DEFAULT_MIGRATION_NAME = 'QueueBoxSchema1764460800000';

/** The QueueBox migration class for `tables`, named `name` (default: the shipped migration's name). */
export function migrationFor(tables: QueueBoxTables, name = DEFAULT_MIGRATION_NAME): { name: string; class: new () => MigrationInterface } {
  try {
    return { name, class: createQueueBoxMigration({ tables: { outbox: tables.outbox.qualified, inbox: tables.inbox.qualified }, name }) };
  } catch (error) {
    if (error instanceof QueueBoxConfigError) throw new CliUsageError(`--migration-name: ${error.message}`);
    throw error;
  }
}
