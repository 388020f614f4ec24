import type { DataSource, DataSourceOptions } from 'typeorm';
import type { TableName } from '../common/identifiers';
import type { Dialect, DialectSettings, QueueBoxTables } from './dialect';
import type { InspectionQuery } from './inspection.sql';
import type { SchemaMigration } from './schema-migrations';

// What one database's driver entry says (each dialect folder's driver.ts writes one; drivers.ts lists them).

/** Where a dialect sends its warnings (and, with `log`, what it did); the Nest provider that creates it passes a Nest `Logger`. */
export interface DialectLog {
  warn(message: string): void;
  log?(message: string): void;
}

/** Why a database URL cannot be used; the CLI turns each into its usage error (each throws). */
export interface UrlProblems {
  noHost(): never;
  noDatabase(): never;
  badParameter(name: string, value: string): never;
}

/** What a database URL says, for one driver. */
export interface UrlConnection {
  connection: DataSourceOptions;
  /** `host:port`, for messages. */
  where: string;
  user: string;
  database: string;
}

/**
 * What `queuebox verify` (lib/cli/verify) asks of a database beside QueueBox's own statements: the
 * settings it reports, and how it finds and ends the sessions of its worker processes (the
 * "terminated session" fault). Each is a read or a session end, run with `dataSource.query`.
 */
export interface VerifyQueries {
  /** The connection options with every connection of the pool named `name`, so its sessions can be found by that name. */
  withApplicationName(connection: DataSourceOptions, name: string): DataSourceOptions;
  /** Rows of `{ name, value }`: the server's version and the settings that bear on claims and fences (isolation, snapshot reads, ...). */
  settings(): InspectionQuery;
  /**
   * Whether this login may see and end the sessions of its own other connections: one row of
   * `{ may_see, may_end }` (1 or 0). None where any login may end its own sessions (PostgreSQL).
   */
  sessionPermissions?(): InspectionQuery;
  /** The permissions `sessionPermissions` checks, as the database names them, for the report. */
  readonly sessionPermissionNames: { see: string; end: string };
  /** The sessions (`{ session }`, an integer) of the connections named `name` in this database, this one excepted. */
  sessionsNamed(name: string): InspectionQuery;
  /** Ends session `session` (an integer `sessionsNamed` returned). */
  sessionEnd(session: number): InspectionQuery;
  /**
   * The keys (outbox `key`, inbox `aggregate_id`; `{ key }`, null for none) of the rows of one
   * destination or source claimed within the last `ms` milliseconds by the database clock, in any
   * state now: what the `admin-pause` scenario reads at the end of a pause. A scan of verify's own
   * table, filtered by name.
   */
  claimedWithin(table: TableName, component: 'outbox' | 'inbox', name: string, ms: number): InspectionQuery;
}

/** What the CLI says of one migration: once applied (`queuebox migrate`), and while not (`queuebox status`). */
export interface MigrationNotes {
  applied: string;
  notApplied: string;
}

/**
 * Everything QueueBox knows about one database, keyed by TypeORM's driver type. Adding a database
 * means one folder under lib/dialects and one entry in `ENTRIES` (docs/architecture.md).
 */
export interface DialectDriver<T extends string = string> {
  /** TypeORM's `DataSourceOptions.type`. */
  readonly type: T;
  /** The database's name in messages ("PostgreSQL"). */
  readonly displayName: string;
  /** The Nest logger context of the dialect's warnings. */
  readonly logContext: string;
  create(p: { dataSource: DataSource; tables: QueueBoxTables; settings: DialectSettings; log: DialectLog }): Dialect;
  /** The statements of each numbered migration, one statement per entry. */
  readonly migrations: Record<SchemaMigration, { up(t: QueueBoxTables): string[]; down(t: QueueBoxTables): string[] }>;
  /**
   * The partitioned layout (issue 37, docs/partitioning.md), where this database has one: the
   * outbox and inbox, empty, made again partitioned (`up`) or plain (`down`).
   */
  readonly partitionedLayout?: { up(t: QueueBoxTables): string[]; down(t: QueueBoxTables): string[] };
  /** Migrations that run no statement here, with the comment their plain-SQL script shows instead. */
  readonly noOpMigrations: Partial<Record<SchemaMigration, string>>;
  /** The plain-SQL scripts (`queuebox sql`, `npm run sql`): what ends each statement, and the sql/ folder. */
  readonly script: { terminator: string; folder: string };
  /** What a plain-SQL script's first line calls a migration, where this database differs from `MIGRATION_FILES`. */
  readonly scriptTitles?: Partial<Record<SchemaMigration, string>>;
  /**
   * What the CLI prints about a migration applied or not (`queuebox migrate`, `queuebox status`)
   * where this database differs from the shared texts (`cliMessages.migrationNotes`).
   */
  readonly migrationNotes: Partial<Record<SchemaMigration, MigrationNotes>>;
  /** URL schemes the CLI accepts for this database (`postgres://`), lower case. */
  readonly urlSchemes: readonly string[];
  /** The CLI's connection options for a URL of one of `urlSchemes`. */
  connectionFromUrl(p: {
    url: URL;
    raw: string;
    user: string;
    password: string;
    database: string;
    connectTimeoutMs: number;
    poolMax: number;
    fail: UrlProblems;
  }): UrlConnection;
  /**
   * The size of the pool the driver builds from these options, as the driver reads them (TypeORM
   * passes some options on and lets `extra` override them), for the start-up pool check.
   */
  poolSize(options: DataSourceOptions): number;
  /** The connection with a client-side request timeout of `timeoutMs` (long migrations), where the driver has one. */
  withRequestTimeout(connection: DataSourceOptions, timeoutMs: number): DataSourceOptions;
  /**
   * How this database's driver says, when connecting, that the database does not exist or the
   * login was refused: error codes (of the error or one it wraps) and message texts. The CLI
   * turns them into a line that says what to check.
   */
  readonly connectionFailures: {
    databaseMissing: { codes: readonly string[]; text?: RegExp };
    authenticationFailed: { codes: readonly string[] };
  };
  /** What `queuebox verify` asks of this database: its settings, its workers' sessions and how to end them. */
  readonly verify: VerifyQueries;
  /** Read-only statements for the CLI's `status` and `queuebox/testing`. */
  readonly inspection: {
    finishedCount(tables: QueueBoxTables): InspectionQuery;
    rowStates(table: TableName, ids: readonly string[]): InspectionQuery;
  };
}
