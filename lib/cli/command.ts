import type { ParseArgsConfig } from 'node:util';

/** Where a command writes, and the environment it reads (`QUEUEBOX_DATABASE_URL`, `DATABASE_URL`). */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  env: NodeJS.ProcessEnv;
}

/** Parsed options; an option declared `multiple` is a `string[]`. */
export type CommandValues = Record<string, string | boolean | string[] | undefined>;

/** One `queuebox <name>` command: its options (for `node:util` parseArgs), its help and what it does. */
export interface Command {
  name: string;
  /** One line for `queuebox --help`. */
  summary: string;
  /** The full `queuebox <name> --help` text. */
  help: string;
  options: NonNullable<ParseArgsConfig['options']>;
  /** Whether it takes positional arguments (a sub-command such as `dead-letters list`). */
  positionals?: boolean;
  /** Resolves to the exit code; throws `CliUsageError` (2) or anything else (1). */
  run(values: CommandValues, io: CliIo, positionals: string[]): Promise<number>;
}

/** Options of the commands that connect to a database. */
export const databaseOptions = {
  url: { type: 'string' },
  tables: { type: 'string' },
  'migrations-table': { type: 'string' },
  'migration-name': { type: 'string' },
} as const satisfies Command['options'];

/** Options of the commands that connect to read or change rows (no migration involved). */
export const connectionOptions = { url: databaseOptions.url, tables: databaseOptions.tables } as const satisfies Command['options'];

export const CONNECTION_OPTIONS_HELP = `  --url <url>                 Database URL; default $QUEUEBOX_DATABASE_URL, then $DATABASE_URL
                              postgres://user:password@host:5432/database  (or postgresql://)
                              mssql://user:password@host:1433/database     (or sqlserver://)
                              (see \`queuebox --help\` for the SQL Server parameters)
  --tables <spec>             Table names as given to QueueBoxModule: outbox=<table>,inbox=<table>,instances=<table>
                              (each name or schema.name; default queuebox_outbox, queuebox_inbox,
                              queuebox_instances in the outbox's schema)`;

export const DATABASE_OPTIONS_HELP = `${CONNECTION_OPTIONS_HELP}
  --migrations-table <name>   TypeORM's migrations table (migrationsTableName); default migrations
  --migration-name <name>     Name of the QueueBox migration; default QueueBoxSchema1764460800000
                              (give each QueueBox schema in one database its own, ending in 13 digits)`;

export const DEFAULT_MIGRATIONS_TABLE = 'migrations';
