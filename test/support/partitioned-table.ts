import { randomUUID } from 'node:crypto';
import { after, before } from 'node:test';
import { Client, Pool } from 'pg';
import { inboxKeysTableOf, messageIdsTableOf, parseTableName, partitionsTableOf } from '../../lib/common/identifiers';
import {
  type PartitionLog,
  type PartitionSql,
  PartitionUpkeep,
  type PartitionUpkeepOptions,
} from '../../lib/dialects/postgres/partition-upkeep';
import {
  createPartitionsTableSql,
  createSideTableSql,
  dropSideTableTriggersSql,
  type PartitionedKind,
  partitionedInboxInsertSql,
  partitionedOutboxInsertSql,
  sideTableTriggersSql,
} from '../../lib/dialects/postgres/partitions.sql';
import { eventually, type TestDatabase } from './database';

// Issue 37's partitioned outbox and inbox for the upkeep, retention and uniqueness tests: the
// plain tables' columns and indexes partitioned by id range (as bench/partitions.mjs builds them),
// without partitions; the upkeep makes them. Until the layout has its migration.

export const PARTITIONED_TABLE = parseTableName('test', 'p_outbox');
export const PARTITIONED_INBOX = parseTableName('test', 'p_inbox');

/** The partial indexes of the partitioned parent (each partition gets its own). */
const PARENT_INDEXES: Record<PartitionedKind, string[]> = {
  outbox: [
    `(available_at, id) WHERE state = 'pending'`,
    `(lease_expires_at) WHERE state = 'processing'`,
    `(sent_at) WHERE state = 'sent'`,
    `(destination, id) WHERE state = 'dead'`,
  ],
  inbox: [
    `(source, available_at, id) WHERE state = 'pending'`,
    `(source, lease_expires_at) WHERE state = 'processing'`,
    `(processed_at) WHERE state = 'processed'`,
    `(source, id) WHERE state = 'dead'`,
  ],
};

/**
 * A fresh `p_outbox` (or `p_inbox`), its bookkeeping table and its side table (dropped first with
 * their partitions): the plain table's columns, partitioned by id range, without partitions.
 */
export async function createPartitionedTable(db: TestDatabase, kind: PartitionedKind = 'outbox'): Promise<void> {
  const table = kind === 'outbox' ? PARTITIONED_TABLE : PARTITIONED_INBOX;
  const [partitions, side] = [partitionsTableOf(table), kind === 'outbox' ? messageIdsTableOf(table) : inboxKeysTableOf(table)];
  await db.query(`DROP TABLE IF EXISTS ${table.name}, ${partitions.name}, ${side.name} CASCADE`);
  await db.query(
    `CREATE TABLE ${table.name} (LIKE queuebox_${kind} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY) PARTITION BY RANGE (id)`,
  );
  await db.query(`ALTER TABLE ${table.name} ADD PRIMARY KEY (id)`);
  for (const index of PARENT_INDEXES[kind]) await db.query(`CREATE INDEX ON ${table.name} ${index}`);
  await db.query(createPartitionsTableSql(table));
  await db.query(createSideTableSql(table, kind));
  for (const statement of [...dropSideTableTriggersSql(table), ...sideTableTriggersSql(table, kind)]) await db.query(statement);
}

/** The upkeep's and retention's statements on a pool of their own: alone (autocommit), or in a transaction. */
export function partitionSql(url: string): { sql: PartitionSql; end: () => Promise<void> } {
  const pool = new Pool({ connectionString: url, max: 6 });
  const sql: PartitionSql = {
    query: async (text, params) => (await pool.query(text, params)).rows,
    transaction: async (work) => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const result = await work(async (text, params) => (await client.query(text, params)).rows);
        await client.query('COMMIT');
        return result;
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {});
        throw error;
      } finally {
        client.release();
      }
    },
  };
  return { sql, end: () => pool.end() };
}

/** The bookkeeping rows, oldest first. */
export const partitionRows = (db: TestDatabase) =>
  db.query<{ name: string; from_id: string; to_id: string; settled: boolean }>(
    'SELECT p.name, p.from_id::text, p.to_id::text, p.settled_at IS NOT NULL AS settled FROM p_outbox_partitions p ORDER BY p.from_id',
  );

/** The partitions PostgreSQL has attached to `p_outbox`, with their bounds. */
export const attachedPartitions = async (db: TestDatabase) =>
  (
    await db.query<{ name: string; bound: string }>(
      `SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'p_outbox'::regclass ORDER BY c.relname`,
    )
  ).map((row) => `${row.name} ${row.bound}`);

const INSERT_ONE = "INSERT INTO p_outbox (message_id, destination, payload) VALUES (gen_random_uuid(), 'd', '{}')";

/**
 * A producer's transaction that inserted one row through the parent (its `id`) and stays open until
 * `commit()`; `end()` closes its connection (a transaction not committed rolls back).
 */
export async function openInsert(db: TestDatabase): Promise<{ id: string; commit(): Promise<void>; end(): Promise<void> }> {
  const producer = new Client({ connectionString: db.url });
  await producer.connect();
  await producer.query('BEGIN');
  const { rows } = await producer.query(`${INSERT_ONE} RETURNING id::text`);
  return {
    id: rows[0].id,
    commit: async () => {
      await producer.query('COMMIT');
    },
    end: () => producer.end(),
  };
}

/** Runs `statements` (default: one insert through the parent) on a connection of its own, each failing after `withinMs`: what must not wait for an upkeep step. */
export async function runWithin(db: TestDatabase, withinMs: number, statements: string[] = [INSERT_ONE]): Promise<void> {
  const client = new Client({ connectionString: db.url, statement_timeout: withinMs });
  await client.connect();
  try {
    for (const statement of statements) await client.query(statement);
  } finally {
    await client.end();
  }
}

/** Waits until a statement of the test's database whose text is like one of `patterns` waits for a lock. */
export const untilWaitingForLock = (db: TestDatabase, what: string, patterns: string[]) =>
  eventually(
    async () =>
      (
        await db.query(
          "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE ANY ($1::text[])",
          [patterns],
        )
      ).length > 0,
    what,
  );

/** What runs a statement: the test database, or a client of a transaction. */
type Runs = { query: (text: string, params?: unknown[]) => Promise<unknown> };
const rowsOf = <T>(result: unknown): T[] => (Array.isArray(result) ? result : (result as { rows: T[] }).rows);

/**
 * Enqueues one pending message per id through the partitioned layout's outbox insert (the side
 * table of message ids first); returns the rows stored (`ifAbsent`: only the new ones).
 */
export async function enqueue(runs: Runs, messageIds: string[], ifAbsent = false): Promise<{ id: string; message_id: string }[]> {
  const none = messageIds.map(() => null);
  const result = await runs.query(partitionedOutboxInsertSql(PARTITIONED_TABLE, ifAbsent), [
    messageIds,
    messageIds.map(() => 'd'),
    none,
    messageIds.map(() => '{}'),
    messageIds.map(() => '{}'),
    none,
    'p_outbox_work',
  ]);
  return rowsOf<{ id: string; message_id: string }>(result);
}

/** Receives one message through the partitioned layout's inbox insert; the id stored, or `undefined` for a duplicate. */
export async function receive(runs: Runs, source: string, key: string): Promise<string | undefined> {
  const result = await runs.query(partitionedInboxInsertSql(PARTITIONED_INBOX), [source, key, null, '{}', '{}', 'p_inbox_work']);
  return rowsOf<{ id: string }>(result)[0]?.id;
}

/** Inserts `count` pending rows through the layout's outbox insert; returns their ids. */
export const insertRows = (db: TestDatabase, count: number) =>
  enqueue(
    db,
    Array.from({ length: count }, () => randomUUID()),
  );

/**
 * Runs `keeper` until partition `name` is settled (or, with `settled` false, unsettled). The horizon
 * is the whole server's: a transaction of a test file running beside this one delays it, never the
 * other way round.
 */
export const runUpkeepUntil = (db: TestDatabase, keeper: PartitionUpkeep, name: string, settled = true) =>
  eventually(
    async () => {
      await keeper.runOnce();
      return (await partitionRows(db)).some((p) => p.name === name && p.settled === settled);
    },
    `${name} ${settled ? 'settled' : 'unsettled'}`,
    20_000,
    50,
  );

/** A partition log that keeps its lines, for a test to read. */
export function recordingPartitionLog(): PartitionLog & { lines: { level: 'log' | 'warn'; message: string }[] } {
  const lines: { level: 'log' | 'warn'; message: string }[] = [];
  return {
    lines,
    log: (message) => lines.push({ level: 'log', message }),
    warn: (message) => lines.push({ level: 'warn', message }),
  };
}

/**
 * What the partition tests of one describe block share: statements on a pool opened in its
 * `before` hook and closed in its `after` hook (registered here), a log that keeps its lines, and
 * an upkeep of `p_outbox` whose clock stands still unless a test gives it one (no rate: partitions
 * of `minSpan`, 1,000 ids).
 */
export function partitionFixture(db: TestDatabase) {
  let opened: ReturnType<typeof partitionSql> | undefined;
  before(() => {
    opened = partitionSql(db.url);
  });
  after(() => opened?.end());
  const pool = () => {
    if (!opened) throw new Error('the partition fixture opens its pool in its before hook: use it from the tests');
    return opened.sql;
  };
  const sql: PartitionSql = {
    query: (text, params) => pool().query(text, params),
    transaction: (work) => pool().transaction(work),
  };
  const log = recordingPartitionLog();
  const upkeep = (options: Partial<PartitionUpkeepOptions> = {}) =>
    new PartitionUpkeep(sql, {
      table: PARTITIONED_TABLE,
      kind: 'outbox',
      intervalMs: 3_600_000,
      aheadMs: 86_400_000,
      minSpan: 1_000,
      now: () => 0,
      logger: log,
      ...options,
    });
  return { sql, log, upkeep };
}
