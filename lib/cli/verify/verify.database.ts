import { DataSource, type DataSourceOptions, MigrationExecutor } from 'typeorm';
import { describeError } from '../../common/errors';
import type { QueueBoxTables } from '../../dialects/dialect';
import { dialectDriver, rowStatesQuery, type VerifyQueries } from '../../dialects/drivers';
import { createQueueBoxMigrations } from '../../migrations/queuebox.migration';
import { resolveTables } from '../../options/options.resolver';
import { connectionFailure } from '../connection-errors';
import { type DatabaseTarget, parseDatabaseUrl } from '../database-url';
import { verifyMessages } from './verify.messages';
import type { ResolvedVerifyOptions } from './verify.options';
import type { RowState } from './verify.records';

// The run's own tables (`<prefix>_outbox`, `_inbox`, `_instances` and TypeORM's `_migrations`,
// in `schema` when given) and what the run reads of the database: its settings, the rows' states,
// the workers' sessions, the claims made during an admin pause. Created with QueueBox's own migrations, dropped with their down steps.

/** The run's table names. */
export interface VerifyTableNames {
  /** As the `tables` option of QueueBoxModule takes them. */
  queuebox: { outbox: string; inbox: string; instances: string };
  resolved: QueueBoxTables;
  migrations: string;
  /** The four, for messages. */
  label: string;
}

export function verifyTableNames(prefix: string, schema: string | undefined): VerifyTableNames {
  const name = (suffix: string) => (schema ? `${schema}.${prefix}_${suffix}` : `${prefix}_${suffix}`);
  const queuebox = { outbox: name('outbox'), inbox: name('inbox'), instances: name('instances') };
  return {
    queuebox,
    resolved: resolveTables(queuebox),
    migrations: `${prefix}_migrations`,
    label: `"${name('outbox')}", "${name('inbox')}", "${name('instances')}" and "${name('migrations')}"`,
  };
}

/** The run's connection to the database (the producers' pool too) and its table chores. */
export class VerifyDatabase {
  private constructor(
    readonly target: DatabaseTarget,
    readonly dataSource: DataSource,
    readonly tables: VerifyTableNames,
  ) {}

  /** Connects to `options.url` with a pool of `pool` connections. */
  static async open(options: ResolvedVerifyOptions, pool: number): Promise<VerifyDatabase> {
    const target = parseDatabaseUrl(options.url, { poolMax: pool });
    const tables = verifyTableNames(options.prefix, options.schema);
    const dataSource = new DataSource({
      ...target.connection,
      ...(options.schema ? { schema: options.schema } : {}),
      migrations: createQueueBoxMigrations({ tables: tables.queuebox }),
      migrationsTableName: tables.migrations,
      logging: false,
    } as DataSourceOptions);
    try {
      await dataSource.initialize();
    } catch (error) {
      throw connectionFailure(error, target);
    }
    return new VerifyDatabase(target, dataSource, tables);
  }

  get queries(): VerifyQueries {
    return dialectDriver(this.target.type).verify;
  }

  get displayName(): string {
    return dialectDriver(this.target.type).displayName;
  }

  /** The server's version and its settings that bear on claims, by name. */
  async settings(): Promise<Record<string, string>> {
    const { sql, params } = this.queries.settings();
    const rows: { name: string; value: string | null }[] = await this.dataSource.query(sql, params);
    return Object.fromEntries(rows.map((row) => [row.name, row.value === null ? '' : String(row.value)]));
  }

  /** Rows in the run's tables that exist now (none when they do not). */
  async rowsPresent(): Promise<number> {
    const runner = this.dataSource.createQueryRunner();
    try {
      let rows = 0;
      for (const table of [this.tables.resolved.outbox, this.tables.resolved.inbox, this.tables.resolved.instances]) {
        if (!(await runner.hasTable(table.qualified))) continue;
        const path = [table.schema, table.name]
          .filter((part): part is string => part !== undefined)
          .map((part) => this.dataSource.driver.escape(part))
          .join('.');
        const [{ n }] = await runner.query(`SELECT COUNT(*) AS n FROM ${path}`);
        rows += Number(n);
      }
      return rows;
    } finally {
      await runner.release();
    }
  }

  /** Creates the run's tables with QueueBox's migrations (all in one transaction). */
  async create(): Promise<void> {
    await this.dataSource.runMigrations({ transaction: 'all' });
  }

  /**
   * Drops the run's tables: every migration recorded is undone (down steps, which drop indexes and
   * functions too), then whatever is left and TypeORM's migrations table are dropped.
   */
  async drop(): Promise<void> {
    const runner = this.dataSource.createQueryRunner();
    try {
      if (await runner.hasTable(this.migrationsPath())) {
        const executed = await new MigrationExecutor(this.dataSource, runner).getExecutedMigrations();
        for (let i = 0; i < executed.length; i++) await this.dataSource.undoLastMigration({ transaction: 'each' });
      }
      for (const table of [this.tables.resolved.instances, this.tables.resolved.outbox, this.tables.resolved.inbox]) {
        await runner.dropTable(table.qualified, true);
      }
      await runner.dropTable(this.migrationsPath(), true);
    } finally {
      await runner.release();
    }
  }

  private migrationsPath(): string {
    const schema = this.tables.resolved.outbox.schema;
    return schema ? `${schema}.${this.tables.migrations}` : this.tables.migrations;
  }

  /** The state of each row, by id (produced messages' rows). */
  async rowStates(component: 'outbox' | 'inbox', ids: readonly string[]): Promise<Map<string, RowState>> {
    const states = new Map<string, RowState>();
    const table = this.tables.resolved[component];
    for (let from = 0; from < ids.length; from += 500) {
      const { sql, params } = rowStatesQuery(this.target.type, table, ids.slice(from, from + 500));
      const rows: { id: string; state: string; attempts: number; last_error: string | null }[] = await this.dataSource.query(sql, params);
      for (const row of rows) {
        states.set(String(row.id), { state: row.state, attempts: Number(row.attempts), lastError: row.last_error });
      }
    }
    return states;
  }

  /** The keys of the rows of `name` (a destination or source) claimed within the last `ms` ms by the database clock (null: a row without one). */
  async claimedWithin(component: 'outbox' | 'inbox', name: string, ms: number): Promise<(string | null)[]> {
    const { sql, params } = this.queries.claimedWithin(this.tables.resolved[component], component, name, Math.max(0, Math.round(ms)));
    const rows: { key: string | null }[] = await this.dataSource.query(sql, params);
    return rows.map((row) => row.key);
  }

  /** Why this login may not end the workers' sessions, or undefined when it may. */
  async sessionsRefusal(): Promise<string | undefined> {
    const permissions = this.queries.sessionPermissions?.();
    if (!permissions) return undefined;
    const [row]: { may_see: number | boolean; may_end: number | boolean }[] = await this.dataSource.query(
      permissions.sql,
      permissions.params,
    );
    const missing = [
      Number(row?.may_see) === 1 ? undefined : `see other sessions (${this.queries.sessionPermissionNames.see})`,
      Number(row?.may_end) === 1 ? undefined : `end them (${this.queries.sessionPermissionNames.end})`,
    ].filter((text): text is string => text !== undefined);
    return missing.length > 0 ? verifyMessages.sessionsNotAllowed(missing.join(' or ')) : undefined;
  }

  /** Ends every session of the connections named `applicationName`; resolves how many it ended. */
  async endSessions(applicationName: string): Promise<number> {
    const named = this.queries.sessionsNamed(applicationName);
    const rows: { session: number | string }[] = await this.dataSource.query(named.sql, named.params);
    let ended = 0;
    let refused: unknown;
    for (const { session } of rows) {
      const end = this.queries.sessionEnd(Number(session));
      try {
        await this.dataSource.query(end.sql, end.params);
        ended++;
      } catch (error) {
        refused ??= error;
      }
    }
    // A session that ended by itself in between is no failure; none ended is the login's.
    if (ended === 0 && refused !== undefined) throw new Error(verifyMessages.sessionsFailed(describeError(refused).split('\n')[0]));
    return ended;
  }

  async close(): Promise<void> {
    if (this.dataSource.isInitialized) await this.dataSource.destroy();
  }
}
