import type { MigrationInterface } from 'typeorm';
import type { QueueBoxTables } from '../dialects/dialect';
import { DEFAULT_MIGRATION_NAMES } from '../dialects/schema-migrations';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import {
  createQueueBoxClaimsMigration,
  createQueueBoxKeyCollationMigration,
  createQueueBoxMigration,
  createQueueBoxOperationsMigration,
} from '../migrations/queuebox.migration';
import { resolveTables } from '../options/options.resolver';
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

export interface QueueBoxMigrations {
  /** The schema migration's name (`--migration-name`, default the shipped one), the operations, claims and key-collation migrations'. */
  names: { schema: string; operations: string; claims: string; keyCollation: string };
  /** The classes, in the order they run. */
  classes: (new () => MigrationInterface)[];
}

/**
 * The QueueBox migrations for `tables`: the schema (named `name`), the operations indexes, the
 * claims' indexes and functions, the key columns' binary collation (SQL Server).
 */
export function migrationsFor(tables: QueueBoxTables, name: string = DEFAULT_MIGRATION_NAMES.schema): QueueBoxMigrations {
  const named = { outbox: tables.outbox.qualified, inbox: tables.inbox.qualified };
  try {
    return {
      names: {
        schema: name,
        operations: DEFAULT_MIGRATION_NAMES.operations,
        claims: DEFAULT_MIGRATION_NAMES.claims,
        keyCollation: DEFAULT_MIGRATION_NAMES.keyCollation,
      },
      classes: [
        createQueueBoxMigration({ tables: named, name }),
        createQueueBoxOperationsMigration({ tables: named }),
        createQueueBoxClaimsMigration({ tables: named }),
        createQueueBoxKeyCollationMigration({ tables: named }),
      ],
    };
  } catch (error) {
    if (error instanceof QueueBoxConfigError) throw new CliUsageError(`--migration-name: ${error.message}`);
    throw error;
  }
}
