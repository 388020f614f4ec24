import { randomBytes } from 'node:crypto';
import { DataSource, type DataSourceOptions, type QueryRunner } from 'typeorm';
import { parseTableName } from '../../lib/common/identifiers';
import { claimFunctionNames } from '../../lib/dialects/postgres/claim-functions.sql';
import { pgTable } from '../../lib/dialects/postgres/quoting';
import { outboxClaimSql } from '../../lib/dialects/sqlserver/claims.sql';
import { mssqlTable } from '../../lib/dialects/sqlserver/quoting';
import { bigint, guidOrNull, int, name as nvarchar255 } from '../../lib/dialects/sqlserver/sqlserver.params';
import { createQueueBoxMigrations } from '../../lib/migrations/queuebox.migration';
import { resolveTables } from '../../lib/options/options.resolver';
import type { QueueTable } from '../../lib/types/claims';
import { createTestDatabase, runMigrations } from '../support/database';

/** The conformance suite's tables: schema-qualified, so every dialect's quoting and schema creation are exercised. */
export const CONFORMANCE_TABLES = { outbox: 'conformance.outbox', inbox: 'conformance.inbox' } as const;

export interface StoredRow {
  state: string;
  claimToken: string | null;
  attempts: number;
  lastError: string | null;
}

/**
 * A migrated database of one dialect, with the few raw statements the suite needs to look at
 * rows or move time along. Everything under test goes through the Dialect and LeaseService.
 */
export interface ConformanceDatabase {
  /** The test database's name on its server. */
  name: string;
  /** Initialized, with a pool large enough for the concurrency tests. */
  dataSource: DataSource;
  reset(): Promise<void>;
  row(table: QueueTable, id: string): Promise<StoredRow>;
  count(table: QueueTable, state?: string): Promise<number>;
  /** The payload column's stored text (PostgreSQL: jsonb's own rendering of it; SQL Server: the text as written). */
  payloadText(table: QueueTable, id: string): Promise<string>;
  /** Ends a claim's lease now, as if time had passed. */
  expireLease(table: QueueTable, id: string): Promise<void>;
  /** Makes every pending row of `table` available now (past a retry's delay). */
  makeAvailable(table: QueueTable): Promise<void>;
  /** Moves the finish time (`sent_at` / `processed_at`) and the last claim of every row of `table` back by `days`. */
  age(table: QueueTable, days: number): Promise<void>;
  /**
   * The pages one outbox claim of `limit` rows reads on the rows as they are (PostgreSQL: shared
   * buffers hit or read, by EXPLAIN ANALYZE of the claim function the dialect calls; SQL Server:
   * the logical reads of the session that runs the claim batch the dialect sends). The claim runs
   * twice in one session, each time in a transaction that is rolled back (nothing is claimed);
   * the second, with the plans cached, is what is returned.
   */
  claimReads(limit: number): Promise<number>;
  /** Whether a database of that name exists on this database's server. */
  databaseExists(name: string): Promise<boolean>;
  close(): Promise<void>;
}

/** What `open` may be given instead of its defaults (the harness's own case: a failed open leaves nothing behind). */
export interface OpenOptions {
  /** The migration classes to run instead of QueueBox's. */
  migrations?: NonNullable<DataSourceOptions['migrations']>;
  /** Told the test database's name as soon as it exists. */
  created?: (database: string) => void;
}

export interface DialectHarness {
  name: string;
  /** Why the dialect's suite does not run here, when it does not. */
  skip?: string;
  /** A new test database, migrated; when that fails, the database is dropped before the error is thrown. */
  open(options?: OpenOptions): Promise<ConformanceDatabase>;
}

const POOL_SIZE = 25;

/** Runs `measure` twice on one connection, each time in a transaction that is rolled back; returns the second result. */
async function inRolledBackTransactions(dataSource: DataSource, measure: (runner: QueryRunner) => Promise<number>): Promise<number> {
  const runner = dataSource.createQueryRunner();
  await runner.connect();
  try {
    let result = 0;
    for (let run = 0; run < 2; run++) {
      await runner.startTransaction('READ COMMITTED');
      try {
        result = await measure(runner);
      } finally {
        await runner.rollbackTransaction();
      }
    }
    return result;
  } finally {
    await runner.release();
  }
}

/**
 * PostgreSQL; with `sessionIsolation`, every session of the test database begins its transactions
 * (and runs a statement sent alone) at that level (`ALTER DATABASE ... SET
 * default_transaction_isolation`), so the whole suite runs through the path where QueueBox names
 * READ COMMITTED itself, its values inlined (I11). The suite's own transactions stand for the
 * application's, which keep their own level (I11): the DataSource's `isolationLevel` makes them
 * READ COMMITTED, as in the plain run (20 concurrent receives of one key, each in a SERIALIZABLE
 * transaction of the caller's, may fail as the caller's serializable transactions do). The suite's
 * lone statements (row, count, expireLease...) run at the sessions' level.
 */
const postgres = (name: string, sessionIsolation?: 'serializable'): DialectHarness => ({
  name,
  async open(options = {}) {
    const db = await createTestDatabase({ migrate: false });
    options.created?.(db.name);
    let dataSource: DataSource;
    try {
      if (sessionIsolation) await db.query(`ALTER DATABASE ${db.name} SET default_transaction_isolation = '${sessionIsolation}'`);
      await runMigrations(db.url, options.migrations ?? createQueueBoxMigrations({ tables: CONFORMANCE_TABLES }));
      dataSource = await new DataSource({
        type: 'postgres',
        url: db.url,
        extra: { max: POOL_SIZE },
        logging: false,
        isolationLevel: sessionIsolation ? 'READ COMMITTED' : undefined,
      }).initialize();
    } catch (error) {
      // A migration that fails here must not leave the test database behind.
      await db.drop().catch(() => undefined);
      throw error;
    }
    const table = {
      outbox: pgTable(parseTableName('outbox', CONFORMANCE_TABLES.outbox)),
      inbox: pgTable(parseTableName('inbox', CONFORMANCE_TABLES.inbox)),
    };
    return {
      name: db.name,
      dataSource,
      reset: async () => {
        await dataSource.query(`TRUNCATE ${table.outbox}, ${table.inbox}`);
      },
      row: async (kind, id) => {
        const [row] = await dataSource.query(
          `SELECT state, claim_token::text AS claim_token, attempts, last_error FROM ${table[kind]} WHERE id = $1`,
          [id],
        );
        return { state: row.state, claimToken: row.claim_token, attempts: row.attempts, lastError: row.last_error };
      },
      count: async (kind, state) => {
        const where = state ? 'WHERE state = $1' : '';
        const [row] = await dataSource.query(`SELECT count(*)::int AS n FROM ${table[kind]} ${where}`, state ? [state] : []);
        return row.n;
      },
      payloadText: async (kind, id) => {
        const [row] = await dataSource.query(`SELECT payload::text AS payload FROM ${table[kind]} WHERE id = $1`, [id]);
        return row.payload;
      },
      expireLease: async (kind, id) => {
        await dataSource.query(`UPDATE ${table[kind]} SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`, [id]);
      },
      makeAvailable: async (kind) => {
        await dataSource.query(`UPDATE ${table[kind]} SET available_at = clock_timestamp() - interval '1 second' WHERE state = 'pending'`);
      },
      age: async (kind, days) => {
        const finished = kind === 'outbox' ? 'sent_at' : 'processed_at';
        await dataSource.query(
          `UPDATE ${table[kind]} SET ${finished} = ${finished} - make_interval(days => $1), claimed_at = claimed_at - make_interval(days => $1)`,
          [days],
        );
      },
      databaseExists: async (name) => (await dataSource.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).length === 1,
      claimReads: (limit) =>
        inRolledBackTransactions(dataSource, async (runner) => {
          const [{ 'QUERY PLAN': plan }] = await runner.query(
            `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM ${claimFunctionNames(resolveTables(CONFORMANCE_TABLES)).outbox}($1::integer, $2::bigint, NULL::uuid)`,
            [limit, 60_000],
          );
          const { Plan: top } = (plan as { Plan: Record<string, number> }[])[0];
          return top['Shared Hit Blocks'] + top['Shared Read Blocks'];
        }),
      close: async () => {
        await dataSource.destroy();
        await db.drop();
      },
    };
  },
});

/**
 * Set (to `1`) by scripts/test.mjs for its test processes once it printed SQL_SERVER_SKIPPED:
 * the conformance files then leave the skipped dialect out instead of each reporting it skipped.
 */
export const SKIPS_PRINTED = 'QUEUEBOX_TEST_SKIPS_PRINTED';

/** What scripts/test.mjs prints, once per run; a conformance file run alone reports it where it skips the suite. */
export const SQL_SERVER_SKIPPED = 'SQL Server tests skipped: QUEUEBOX_MSSQL_URL is not set (no SQL Server on this machine).';

/**
 * `mssql://user:password@host:port/database`; `?encrypt=false` and `?trustServerCertificate=false`
 * override the defaults meant for a local container (encrypted, any certificate).
 */
function sqlServerOptions(url: string, database?: string): DataSourceOptions {
  const parsed = new URL(url);
  return {
    type: 'mssql',
    host: parsed.hostname,
    port: Number(parsed.port || 1433),
    username: decodeURIComponent(parsed.username),
    password: decodeURIComponent(parsed.password),
    database: database ?? (decodeURIComponent(parsed.pathname.slice(1)) || 'master'),
    options: {
      encrypt: parsed.searchParams.get('encrypt') !== 'false',
      trustServerCertificate: parsed.searchParams.get('trustServerCertificate') !== 'false',
    },
    pool: { max: POOL_SIZE },
    logging: false,
  };
}

/**
 * QUEUEBOX_MSSQL_READ_COMMITTED_SNAPSHOT (`ON` or `OFF`, as npm run test:sqlserver sets it for its
 * two runs) is set on each test database; unset, it keeps the server's default (OFF, from model).
 */
export function readCommittedSnapshot(value = process.env.QUEUEBOX_MSSQL_READ_COMMITTED_SNAPSHOT): 'ON' | 'OFF' | undefined {
  if (value === undefined || value === '') return undefined;
  if (value === 'ON' || value === 'OFF') return value;
  throw new Error(`QUEUEBOX_MSSQL_READ_COMMITTED_SNAPSHOT must be ON or OFF, not ${JSON.stringify(value)}`);
}

/** Runs `work` on the server's own database (master, or the URL's), to create or drop a test database. */
async function onServer(url: string, work: (dataSource: DataSource) => Promise<void>): Promise<void> {
  const admin = await new DataSource(sqlServerOptions(url)).initialize();
  try {
    await work(admin);
  } finally {
    await admin.destroy();
  }
}

const sqlServer: DialectHarness = {
  name: 'SQL Server',
  skip: process.env.QUEUEBOX_MSSQL_URL ? undefined : SQL_SERVER_SKIPPED,
  async open(options = {}) {
    const url = process.env.QUEUEBOX_MSSQL_URL as string;
    const name = `qb_conformance_${randomBytes(6).toString('hex')}`;
    const rcsi = readCommittedSnapshot();
    const drop = () =>
      onServer(url, async (admin) => {
        await admin.query(`ALTER DATABASE [${name}] SET SINGLE_USER WITH ROLLBACK IMMEDIATE`);
        await admin.query(`DROP DATABASE [${name}]`);
      });
    await onServer(url, (admin) => admin.query(`CREATE DATABASE [${name}]`));
    options.created?.(name);
    let dataSource: DataSource | undefined;
    try {
      await onServer(url, async (admin) => {
        if (rcsi) await admin.query(`ALTER DATABASE [${name}] SET READ_COMMITTED_SNAPSHOT ${rcsi} WITH ROLLBACK IMMEDIATE`);
      });
      dataSource = await new DataSource({
        ...sqlServerOptions(url, name),
        migrations: options.migrations ?? createQueueBoxMigrations({ tables: CONFORMANCE_TABLES }),
      } as DataSourceOptions).initialize();
      await dataSource.runMigrations();
    } catch (error) {
      // A migration that fails here must not leave the test database behind on the server.
      await dataSource?.destroy().catch(() => undefined);
      await drop().catch(() => undefined);
      throw error;
    }
    const table = {
      outbox: mssqlTable(parseTableName('outbox', CONFORMANCE_TABLES.outbox)),
      inbox: mssqlTable(parseTableName('inbox', CONFORMANCE_TABLES.inbox)),
    };
    return {
      name,
      dataSource,
      reset: async () => {
        await dataSource.query(`TRUNCATE TABLE ${table.outbox}; TRUNCATE TABLE ${table.inbox};`);
      },
      row: async (kind, id) => {
        const [row] = await dataSource.query(
          `SELECT [state], LOWER(CONVERT(NVARCHAR(36), [claim_token])) AS [claim_token], [attempts], [last_error] FROM ${table[kind]} WHERE [id] = @0`,
          [id],
        );
        return { state: row.state, claimToken: row.claim_token, attempts: row.attempts, lastError: row.last_error };
      },
      count: async (kind, state) => {
        const where = state ? 'WHERE [state] = @0' : '';
        const [row] = await dataSource.query(`SELECT COUNT(*) AS [n] FROM ${table[kind]} ${where}`, state ? [state] : []);
        return row.n;
      },
      payloadText: async (kind, id) => {
        const [row] = await dataSource.query(`SELECT [payload] FROM ${table[kind]} WHERE [id] = @0`, [id]);
        return row.payload;
      },
      expireLease: async (kind, id) => {
        await dataSource.query(`UPDATE ${table[kind]} SET [lease_expires_at] = DATEADD(SECOND, -1, SYSUTCDATETIME()) WHERE [id] = @0`, [
          id,
        ]);
      },
      makeAvailable: async (kind) => {
        await dataSource.query(
          `UPDATE ${table[kind]} SET [available_at] = DATEADD(SECOND, -1, SYSUTCDATETIME()) WHERE [state] = N'pending'`,
        );
      },
      age: async (kind, days) => {
        const finished = kind === 'outbox' ? '[sent_at]' : '[processed_at]';
        await dataSource.query(
          `UPDATE ${table[kind]} SET ${finished} = DATEADD(DAY, -@0, ${finished}), [claimed_at] = DATEADD(DAY, -@0, [claimed_at])`,
          [days],
        );
      },
      databaseExists: async (database) => (await dataSource.query('SELECT DB_ID(@0) AS [id]', [database]))[0].id !== null,
      claimReads: (limit) =>
        inRolledBackTransactions(dataSource, async (runner) => {
          const reads = async () =>
            Number((await runner.query('SELECT [logical_reads] FROM sys.dm_exec_sessions WHERE [session_id] = @@SPID'))[0].logical_reads);
          const before = await reads();
          await runner.query(outboxClaimSql(table.outbox), [
            nvarchar255(`queuebox_outbox_claim_${CONFORMANCE_TABLES.outbox}`),
            int(limit),
            bigint(60_000),
            guidOrNull(null),
          ]);
          return (await reads()) - before;
        }),
      close: async () => {
        await dataSource.destroy();
        await drop();
      },
    };
  },
};

/** Every dialect the suite knows; PostgreSQL always runs (`npm test` provides a server). */
export const HARNESSES: DialectHarness[] = [
  postgres('PostgreSQL'),
  postgres('PostgreSQL, sessions SERIALIZABLE by default', 'serializable'),
  sqlServer,
];
