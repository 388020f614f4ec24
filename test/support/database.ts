import { randomBytes } from 'node:crypto';
import { after, before, beforeEach, describe, type TestOptions } from 'node:test';
import { Client } from 'pg';
import { DataSource, type DataSourceOptions } from 'typeorm';
import { createQueueBoxMigrations, createQueueBoxPartitionedLayoutMigration } from '../../lib/migrations/queuebox.migration';

/** The server the test runner gave us (`scripts/test.mjs` starts an embedded one when none is set). */
export function serverUrl(): string {
  const url = process.env.QUEUEBOX_PG_URL;
  if (!url) throw new Error('QUEUEBOX_PG_URL is not set: run the tests with `npm test`, which provides a PostgreSQL server.');
  return url;
}

export interface TestDatabase {
  url: string;
  name: string;
  /** Runs SQL on a fresh connection of its own (never through the code under test). */
  query<T = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<T[]>;
  drop(): Promise<void>;
}

/** A new, empty database per test file, so files run in parallel without touching each other. */
export async function createTestDatabase(
  options: { migrate?: boolean; tables?: { outbox?: string; inbox?: string }; layout?: TestLayout } = {},
): Promise<TestDatabase> {
  const name = `qb_test_${randomBytes(6).toString('hex')}`;
  const admin = new Client({ connectionString: serverUrl() });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(serverUrl());
  url.pathname = `/${name}`;
  const db: TestDatabase = {
    url: url.toString(),
    name,
    async query(sql, params) {
      const client = new Client({ connectionString: db.url });
      await client.connect();
      try {
        return (await client.query(sql, params as unknown[])).rows;
      } finally {
        await client.end();
      }
    },
    async drop() {
      const client = new Client({ connectionString: serverUrl() });
      await client.connect();
      try {
        await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await client.end();
      }
    },
  };
  if (options.migrate ?? true) await migrate(db.url, options.tables, options.layout);
  return db;
}

/** What `describe` and `createTestDatabase` take, and the tables to empty before each test. */
export type DatabaseSetup = TestOptions & Parameters<typeof createTestDatabase>[0] & { truncate?: string[] };

/**
 * `describe(title, options, body)` whose tests share a database of their own, the set-up most test
 * files repeated by hand: the database is created (and migrated, unless `migrate: false`) before the
 * block's own `before` hooks, emptied with one `TRUNCATE` of `truncate` before each test ahead of
 * the block's own `beforeEach` hooks, and dropped after the block's own `after` hooks (so an app
 * the block closes there is closed first). `body` gets the database at once; its members work from
 * the hooks and tests on, not while `body` registers them.
 */
export function describeWithDatabase(title: string, body: (db: TestDatabase) => void): void;
export function describeWithDatabase(title: string, setup: DatabaseSetup, body: (db: TestDatabase) => void): void;
export function describeWithDatabase(
  title: string,
  setupOrBody: DatabaseSetup | ((db: TestDatabase) => void),
  maybeBody?: (db: TestDatabase) => void,
): void {
  const [{ truncate, migrate, tables, ...options }, body] =
    typeof setupOrBody === 'function' ? [{}, setupOrBody] : [setupOrBody, maybeBody as (db: TestDatabase) => void];
  describe(title, options, () => {
    let created: TestDatabase | undefined;
    const current = () => {
      if (!created) throw new Error(`the database of "${title}" is created in its before hook: use it from the hooks and tests`);
      return created;
    };
    const db: TestDatabase = {
      get url() {
        return current().url;
      },
      get name() {
        return current().name;
      },
      query: <T>(sql: string, params?: unknown[]) => current().query<T>(sql, params),
      drop: () => current().drop(),
    };
    before(async () => {
      created = await createTestDatabase({ migrate, tables });
    });
    if (truncate?.length) beforeEach(() => current().query(`TRUNCATE ${truncate.join(', ')}`));
    body(db);
    after(() => created?.drop());
  });
}

/**
 * For a `describe` block whose tests each make databases of their own: returns `newDatabase`,
 * which makes one (`createTestDatabase`'s options), and registers here, at the point of the call,
 * the `after` hook that drops every one made.
 */
export function testDatabases(): (options?: Parameters<typeof createTestDatabase>[0]) => Promise<TestDatabase> {
  const databases: TestDatabase[] = [];
  after(() => Promise.all(databases.splice(0).map((db) => db.drop())));
  return async (options) => {
    const db = await createTestDatabase(options);
    databases.push(db);
    return db;
  };
}

/** The layout of the tables (issue 37): the partitioned lane's, `QUEUEBOX_TEST_LAYOUT`, unless a test names one. */
export type TestLayout = 'plain' | 'partitioned';

/**
 * Applies the QueueBox schema through its TypeORM migration classes, as users do; in the
 * partitioned layout (issue 37) when `layout` says so, or, without one, `QUEUEBOX_TEST_LAYOUT`.
 */
export async function migrate(
  url: string,
  tables?: { outbox?: string; inbox?: string },
  layout: TestLayout = process.env.QUEUEBOX_TEST_LAYOUT === 'partitioned' ? 'partitioned' : 'plain',
): Promise<void> {
  const partitioned = layout === 'partitioned' ? [createQueueBoxPartitionedLayoutMigration({ tables })] : [];
  await runMigrations(url, [...createQueueBoxMigrations({ tables }), ...partitioned]);
}

/** Runs `migrations` (TypeORM migration classes) on the database at `url`, recorded in `migrationsTableName` when given. */
export async function runMigrations(
  url: string,
  migrations: NonNullable<DataSourceOptions['migrations']>,
  migrationsTableName?: string,
): Promise<void> {
  const dataSource = new DataSource({ type: 'postgres', url, migrations, migrationsTableName, logging: false });
  await dataSource.initialize();
  try {
    await dataSource.runMigrations();
  } finally {
    await dataSource.destroy();
  }
}

/** Polls `check` until it returns true (events are preferred; this is for state in another process). */
export async function eventually(check: () => Promise<boolean>, what: string, timeoutMs = 30_000, everyMs = 25): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/**
 * Keeps rewriting rows in flight (`processing`) of `tables` on a connection of its own, until
 * `stop()`: in each READ COMMITTED transaction one random such row of each table, held locked
 * `holdMs`. It stands for any other writer of a claimed row (an operator's UPDATE, a replica's
 * sweep) and changes no value. `stop()` resolves to how many transactions it committed.
 */
export function rewriteRowsInFlight(url: string, tables: string[], holdMs = 20): { stop(): Promise<number> } {
  let running = true;
  const rewriting = (async () => {
    const client = new Client({ connectionString: url });
    await client.connect();
    let committed = 0;
    try {
      while (running) {
        await client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
        for (const table of tables) {
          await client.query(
            `UPDATE ${table} SET attempts = attempts WHERE id = (SELECT id FROM ${table} WHERE state = 'processing' ORDER BY random() LIMIT 1)`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, holdMs));
        await client.query('COMMIT');
        committed++;
      }
    } finally {
      await client.end();
    }
    return committed;
  })();
  return {
    stop: () => {
      running = false;
      return rewriting;
    },
  };
}
