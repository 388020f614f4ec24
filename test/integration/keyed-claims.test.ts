import assert from 'node:assert/strict';
import { after, afterEach, before, it } from 'node:test';
import { Client } from 'pg';
import {
  type ClaimFunctions,
  claimFunctionNames,
  claimFunctions,
  KEY_LOCKS_PER_CLAIM,
} from '../../lib/dialects/postgres/claim-functions.sql';
import { resolveTables } from '../../lib/options/options.resolver';
import { describeWithDatabase, eventually } from '../support/database';

// Issue 36: keyed claims of the claim functions (migration 013) take the claim lock shared and try
// the key lock of each head they find without waiting, instead of taking the claim lock alone. Two
// claims then run side by side, and a claim passes over the keys another claim holds and reads on.
// The window between a search's snapshot and its key lock is held open by a copy of the claim
// function whose key locks wait a second (slowCopy): a claim that commits in it is seen.
// test/integration/ordering.test.ts races claimers and replicas over rows of one key committed out
// of id order; test/integration/unkeyed-claims.test.ts shows a keyed claim still waits for a claim
// lock held exclusively (the query-string claim, a process of an earlier version).

/** Runs a statement, resolves to its rows: a session's (`rowsOf`) or the test database's pool. */
type Run = <T>(sql: string, params?: unknown[]) => Promise<T[]>;

const rowsOf =
  (client: Client): Run =>
  async <T>(sql: string, params?: unknown[]) =>
    (await client.query(sql, params)).rows as T[];

interface Kind {
  name: string;
  /** Its claim function. */
  fn: keyof ClaimFunctions;
  /** Inserts a row for each key of `$1` (a text[]), in order, returning their ids as text. */
  insertSql: string;
  /** The claim function's call for up to `limit` rows: the ids and keys it claimed. */
  claim(limit?: number): string;
  /** The ids of the rows of key `$1` in flight. */
  inFlightSql: string;
}

const inboxKind = (name: string, fn: 'relay' | 'pull', source: string, claim: Kind['claim']): Kind => ({
  name,
  fn,
  insertSql: `INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload)
    SELECT '${source}', gen_random_uuid()::text, k, '{}' FROM unnest($1::text[]) WITH ORDINALITY AS u(k, n) ORDER BY n RETURNING id::text`,
  claim,
  inFlightSql: `SELECT id::text FROM queuebox_inbox WHERE aggregate_id = $1 AND state = 'processing'`,
});

const KINDS: Kind[] = [
  {
    name: 'outbox',
    fn: 'outbox',
    insertSql: `INSERT INTO queuebox_outbox (message_id, destination, "key", payload)
      SELECT gen_random_uuid(), 'd', k, '{}' FROM unnest($1::text[]) WITH ORDINALITY AS u(k, n) ORDER BY n RETURNING id::text`,
    claim: (limit = 10) => `SELECT id::text, "key" AS k FROM queuebox_outbox_claim(${limit}, 60000, NULL)`,
    inFlightSql: `SELECT id::text FROM queuebox_outbox WHERE "key" = $1 AND state = 'processing'`,
  },
  inboxKind(
    'relay',
    'relay',
    'relayed',
    (limit = 10) => `SELECT id::text, aggregate_id AS k FROM queuebox_inbox_relay_claim(${limit}, 60000, ARRAY['relayed'], NULL)`,
  ),
  inboxKind(
    'pull',
    'pull',
    'pulled',
    (limit = 10) => `SELECT id::text, aggregate_id AS k FROM queuebox_inbox_pull_claim(${limit}, 60000, 'pulled', NULL)`,
  ),
];

/** Inserts a row of `kind` with key `key` through `run`; resolves to its id. */
const insert = async (run: Run, kind: Kind, key: string) => (await run<{ id: string }>(kind.insertSql, [[key]]))[0].id;

/** Takes a key lock as `pg_try_advisory_xact_lock(int, int)` does, a second later (see slowCopy). */
const SLOW_TRY_LOCK = `CREATE OR REPLACE FUNCTION queuebox_test_slow_try_lock(integer, integer) RETURNS boolean
  LANGUAGE sql VOLATILE AS $$ SELECT pg_sleep(1) IS NOT NULL AND pg_try_advisory_xact_lock($1, $2) $$`;

/** `kind`'s claim function as migrations write it, named `<name>_slow`, each key lock tried through queuebox_test_slow_try_lock. */
function slowCopy(kind: Kind): { create: string; signature: string; call: Kind['claim'] } {
  const names = claimFunctionNames(resolveTables());
  const fn = claimFunctions(resolveTables())[kind.fn];
  const name = names[kind.fn];
  const slowName = `${name.slice(0, -1)}_slow"`;
  assert.ok(fn.create.includes('pg_try_advisory_xact_lock('), 'the keyed search tries key locks');
  return {
    create: fn.create.replace(name, slowName).replaceAll('pg_try_advisory_xact_lock(', 'queuebox_test_slow_try_lock('),
    signature: fn.signature.replace(name, slowName),
    call: (limit) => kind.claim(limit).replace(`${name.slice(1, -1)}(`, `${slowName.slice(1, -1)}(`),
  };
}

/** The backend process id of `client`'s session. */
const processId = (client: Client) => (client as unknown as { processID: number }).processID;

/** `<prefix>0`, ..., `<prefix><count - 1>`: as many keys. */
const keysOf = (prefix: string, count: number) => Array.from({ length: count }, (_, n) => `${prefix}${n}`);

describeWithDatabase(
  'PostgreSQL: keyed claims lock the keys they take, not the claim lock',
  { truncate: ['queuebox_outbox', 'queuebox_inbox'] },
  (db) => {
    const clients: Client[] = [];
    const connect = async (statementTimeoutMs?: number) => {
      const client = new Client({ connectionString: db.url });
      await client.connect();
      clients.push(client);
      // A claim that waits fails the test instead of hanging it.
      if (statementTimeoutMs) await client.query(`SET statement_timeout = ${statementTimeoutMs}`);
      return client;
    };
    let producer: Client;
    let first: Client;
    let second: Client;

    before(async () => {
      producer = await connect();
      first = await connect();
      second = await connect(5_000);
    });
    afterEach(async () => {
      // A failed test leaves no transaction open for the next one's TRUNCATE to wait for.
      await Promise.all(clients.map((client) => client.query('ROLLBACK')));
    });
    after(async () => {
      await Promise.all(clients.map((client) => client.end()));
    });

    for (const kind of KINDS) {
      it(`${kind.name}: a second claim runs while the first is open, takes other keys, and leaves the key the first holds (rows committed out of id order)`, async () => {
        const key = `${kind.name}-k`;
        const other = `${kind.name}-other`;

        // Row `earlier` of the key is inserted first but commits last.
        await producer.query('BEGIN');
        const earlier = await insert(rowsOf(producer), kind, key);
        const later = await insert(db.query.bind(db), kind, key);

        // The first claim sees only `later` (the head of its key in its snapshot) and holds it, open.
        await first.query('BEGIN');
        const firstClaim = (await first.query<{ id: string; k: string }>(kind.claim())).rows;
        assert.deepEqual(firstClaim, [{ id: later, k: key }]);

        await producer.query('COMMIT');
        const otherRow = await insert(db.query.bind(db), kind, other);

        // The second claim's snapshot sees `earlier` as the head of the key, and nothing of it in
        // flight (the first claim has not committed): only the key lock keeps it off `earlier`. It
        // does not wait for the first claim either: it takes the other key's row at once.
        const secondClaim = (await second.query<{ id: string; k: string }>(kind.claim())).rows;
        assert.deepEqual(secondClaim, [{ id: otherRow, k: other }]);

        await first.query('COMMIT');
        const inFlight = await db.query<{ id: string }>(kind.inFlightSql, [key]);
        assert.deepEqual(inFlight, [{ id: later }], `only one row of the key in flight (earlier: ${earlier})`);
      });
    }

    it('the key locks a claim takes are released when it commits: the next claim takes the key once its row is finished', async () => {
      const key = 'released';
      const head = await insert(db.query.bind(db), KINDS[0], key);
      const next = await insert(db.query.bind(db), KINDS[0], key);
      await first.query('BEGIN');
      assert.deepEqual((await first.query(KINDS[0].claim())).rows, [{ id: head, k: key }]);
      await first.query('COMMIT');
      assert.deepEqual((await second.query(KINDS[0].claim())).rows, [], 'the head is in flight');
      await db.query("UPDATE queuebox_outbox SET state = 'sent' WHERE id = $1", [head]);
      assert.deepEqual((await second.query(KINDS[0].claim())).rows, [{ id: next, k: key }]);
      const held = await db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
      );
      assert.deepEqual(held, [{ n: 0 }], 'no key lock outlives its claim');
    });

    const advisoryLocksOf = async (client: Client) =>
      (
        await db.query<{ mode: string; n: number }>(
          `SELECT mode, count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = $1 GROUP BY mode ORDER BY mode`,
          [processId(client)],
        )
      ).map(({ mode, n }) => `${mode} ${n}`);

    for (const kind of KINDS) {
      it(`${kind.name}: a claim of up to ${KEY_LOCKS_PER_CLAIM} rows holds a key lock per key; a bigger one holds the claim lock alone and makes keyed claims wait`, async () => {
        const keys = KEY_LOCKS_PER_CLAIM + 20;
        await db.query(kind.insertSql, [keysOf(`${kind.name}-many-`, keys)]);
        await first.query('BEGIN');
        assert.equal((await first.query(kind.claim(KEY_LOCKS_PER_CLAIM))).rows.length, KEY_LOCKS_PER_CLAIM);
        assert.deepEqual(
          await advisoryLocksOf(first),
          [`ExclusiveLock ${KEY_LOCKS_PER_CLAIM}`, 'ShareLock 1'],
          'a key lock per key, the claim lock shared',
        );
        await first.query('ROLLBACK');

        await first.query('BEGIN');
        assert.equal((await first.query(kind.claim(KEY_LOCKS_PER_CLAIM + 1))).rows.length, KEY_LOCKS_PER_CLAIM + 1);
        assert.deepEqual(await advisoryLocksOf(first), ['ExclusiveLock 1'], 'the claim lock alone, no key locks');
        await second.query('BEGIN');
        await second.query('SET LOCAL statement_timeout = 300');
        await assert.rejects(second.query(kind.claim(5)), { code: '57014' }, 'a keyed claim waits for the claim lock held alone');
        await second.query('ROLLBACK');
        await first.query('COMMIT');
        assert.equal(
          (await second.query(kind.claim(KEY_LOCKS_PER_CLAIM))).rows.length,
          keys - KEY_LOCKS_PER_CLAIM - 1,
          'then takes the keys left',
        );
      });
    }

    it('a claim of 10,000 keys (the largest batchSize) leaves the shared lock table to the other sessions of the database', async () => {
      // The table holds about max_locks_per_transaction × max_connections entries (6,400 by
      // default; PostgreSQL lends it some spare memory) for every lock of every session. A claim
      // that held a key lock for each of its 10,000 rows left too little for a session taking as
      // many locks as that ("out of shared memory").
      const claimed = 10_000;
      const [{ entries }] = await db.query<{ entries: number }>(
        `SELECT current_setting('max_locks_per_transaction')::int * current_setting('max_connections')::int AS entries`,
      );
      await db.query(KINDS[0].insertSql, [keysOf('table-', claimed)]);
      await first.query('BEGIN');
      assert.equal((await first.query(KINDS[0].claim(claimed))).rows.length, claimed);
      await second.query('BEGIN');
      const [{ locked }] = (
        await second.query<{ locked: number }>(
          'SELECT count(pg_advisory_xact_lock(1, n))::int AS locked FROM generate_series(1, $1::int) n',
          [entries],
        )
      ).rows;
      assert.equal(locked, entries, `another session takes ${entries} locks while the claim is open`);
      await second.query('ROLLBACK');
      await first.query('COMMIT');
    });

    for (const kind of KINDS) {
      it(`${kind.name}: a claim of the key that commits between a search's snapshot and its key lock is seen by the claim statement, which takes nothing`, async () => {
        // A copy of the claim function whose key locks wait a second before they are tried: the
        // window between the search's snapshot and the key lock, held open where a test can act.
        const slow = slowCopy(kind);
        await db.query(SLOW_TRY_LOCK);
        await db.query(slow.create);
        try {
          const key = `${kind.name}-window`;
          // `earlier` is inserted first but commits last: the slow search sees `later` as the head.
          await producer.query('BEGIN');
          const earlier = await insert(rowsOf(producer), kind, key);
          const later = await insert(db.query.bind(db), kind, key);
          const slowClaim = first.query<{ id: string; k: string }>(slow.call());
          await eventually(
            async () =>
              (await db.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event = $2', [processId(first), 'PgSleep'])).length >
              0,
            'the slow search to wait before its key lock',
          );
          // In the window: `earlier` commits, and a claim takes it (the key lock is free still).
          await producer.query('COMMIT');
          assert.deepEqual((await second.query(kind.claim())).rows, [{ id: earlier, k: key }]);
          // The search found `later` as its key's head in its snapshot; the claim statement, in a
          // snapshot taken after the key lock was granted, sees `earlier` in flight.
          assert.deepEqual((await slowClaim).rows, [], 'nothing claimed');
          assert.deepEqual(await db.query(kind.inFlightSql, [key]), [{ id: earlier }], `one row of the key in flight (later: ${later})`);
        } finally {
          await db.query(`DROP FUNCTION IF EXISTS ${slow.signature}`);
        }
      });
    }

    for (const kind of KINDS) {
      it(`${kind.name}: a second claim passes over the keys the first holds and reads on to a full batch`, async () => {
        const ids = (await db.query<{ id: string }>(kind.insertSql, [keysOf(`${kind.name}-batch-`, 10)])).map((row) => row.id);
        await first.query('BEGIN');
        const firstClaim = (await first.query<{ id: string }>(kind.claim(5))).rows.map((row) => row.id);
        const secondClaim = (await second.query<{ id: string }>(kind.claim(5))).rows.map((row) => row.id);
        await first.query('COMMIT');
        assert.deepEqual(firstClaim.sort(), ids.slice(0, 5).sort(), 'the first claim takes the five oldest heads');
        assert.deepEqual(secondClaim.sort(), ids.slice(5).sort(), 'the second takes the next five, not fewer');
      });
    }
  },
);
