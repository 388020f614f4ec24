import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import { Client } from 'pg';
import type { DataSource } from 'typeorm';
import { withinTimeout } from '../../lib/common/time-limit';
import { claimLockNames, outboxUnkeyedClaimSql } from '../../lib/dialects/postgres/claims.sql';
import { resolveTables } from '../../lib/options/options.resolver';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { createTestApp, type TestApp } from '../support/app';
import { claimsOf, type TestClaims } from '../support/claims';
import { describeWithDatabase, eventually } from '../support/database';

// Issue 36: claims of rows without a key (an inbox aggregate) run without the claim lock while no
// keyed row is unfinished (migration 012's claim functions); with one unfinished they take the
// lock as before, so the keyed claims keep I4 (test/integration/ordering.test.ts races both).

const LOCKS = claimLockNames(resolveTables());

describeWithDatabase('PostgreSQL: unkeyed claims without the claim lock', { truncate: ['queuebox_outbox', 'queuebox_inbox'] }, (db) => {
  let t: TestApp;
  let take: TestClaims;
  let dataSource: DataSource;
  let locker: Client;

  before(async () => {
    t = await createTestApp(db.url, { workers: false }, { poolSize: 6 });
    take = claimsOf(t);
    dataSource = t.app.get(getDataSourceToken());
    locker = new Client({ connectionString: db.url });
    await locker.connect();
  });
  after(async () => {
    await locker?.end();
    await t?.app.close();
  });

  const enqueue = (key?: string) =>
    dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'd', key, payload: { key } }));
  const receive = (source: string, id: string, aggregate: string | null) =>
    db.query("INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload) VALUES ($1, $2, $3, '{}')", [
      source,
      id,
      aggregate,
    ]);

  /** Holds the claim lock `name` in a session of its own while `body` runs. */
  async function holdingLock<T>(name: string, body: () => Promise<T>): Promise<T> {
    await locker.query('SELECT pg_advisory_lock(hashtextextended($1, 0))', [name]);
    try {
      return await body();
    } finally {
      await locker.query('SELECT pg_advisory_unlock(hashtextextended($1, 0))', [name]);
    }
  }

  /** `claim`, which must return while the lock is held: a claim that waits for it fails the test instead of hanging. */
  const withoutWaiting = <T>(claim: Promise<T>, what: string): Promise<T> =>
    withinTimeout(
      claim,
      10_000,
      () => new Error(`${what} waited for the claim lock`),
      () => undefined,
    );

  const waitingForAdvisoryLock = async () =>
    (
      await db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
      )
    )[0].n === 1;

  it('each claim of unkeyed rows runs while another session holds its claim lock; with a keyed row unfinished it waits for the lock', async () => {
    for (let n = 0; n < 3; n++) await enqueue();
    await receive('relayed', 'r1', null);
    await receive('pulled', 'p1', null);
    await holdingLock(LOCKS.outbox, async () => {
      const claims = await withoutWaiting(take.outbox.claim({ limit: 10, leaseMs: 60_000 }), 'the outbox claim');
      assert.equal(claims.length, 3);
    });
    await holdingLock(LOCKS.inbox, async () => {
      const claims = await withoutWaiting(take.relay.claim({ sources: ['relayed'], limit: 10, leaseMs: 60_000 }), 'the relay claim');
      assert.equal(claims.length, 1);
    });
    await holdingLock(`${LOCKS.pullPrefix}pulled`, async () => {
      const claims = await withoutWaiting(take.pull.claimBatch({ source: 'pulled', limit: 10, leaseMs: 60_000 }), 'the pull claim');
      assert.equal(claims.length, 1);
    });

    // A keyed row (an aggregate) unfinished: the claim takes the lock as before, so it waits for it.
    await enqueue('k');
    await receive('relayed', 'r2', 'a');
    await receive('pulled', 'p2', 'a');
    const cases = [
      { lock: LOCKS.outbox, claim: () => take.outbox.claim({ limit: 10, leaseMs: 60_000 }) },
      { lock: LOCKS.inbox, claim: () => take.relay.claim({ sources: ['relayed'], limit: 10, leaseMs: 60_000 }) },
      { lock: `${LOCKS.pullPrefix}pulled`, claim: () => take.pull.claimBatch({ source: 'pulled', limit: 10, leaseMs: 60_000 }) },
    ];
    for (const { lock, claim } of cases) {
      let claimed: Promise<unknown[]> | undefined;
      await holdingLock(lock, async () => {
        claimed = claim();
        await eventually(waitingForAdvisoryLock, `the claim to wait for ${lock}`);
      });
      assert.equal((await claimed)?.length, 1, `the keyed row claimed once ${lock} was released`);
    }
  });

  it('four sessions claiming unkeyed rows at once take each row exactly once', async () => {
    const ROWS = 3000;
    await db.query(
      "INSERT INTO queuebox_outbox (message_id, destination, payload) SELECT gen_random_uuid(), 'd', to_jsonb(g) FROM generate_series(1, $1::int) g",
      [ROWS],
    );
    const claimers = await Promise.all(Array.from({ length: 4 }, () => createTestApp(db.url, { workers: false }, { poolSize: 2 })));
    const claimed: string[] = [];
    try {
      await Promise.all(
        claimers.map(async (claimer) => {
          const claims = claimsOf(claimer);
          for (;;) {
            const batch = await claims.outbox.claim({ limit: 25, leaseMs: 60_000 });
            if (batch.length === 0) return;
            claimed.push(...batch.map((claim) => claim.id));
          }
        }),
      );
      const [row] = await db.query<{ processing: number; attempts: number }>(
        "SELECT count(*)::int AS processing, max(attempts) AS attempts FROM queuebox_outbox WHERE state = 'processing'",
      );
      assert.deepEqual(row, { processing: ROWS, attempts: 1 }, 'each row claimed by one claim');
    } finally {
      await Promise.all(claimers.map((claimer) => claimer.app.close()));
    }
    assert.equal(new Set(claimed).size, claimed.length, 'no row claimed twice');
    assert.equal(claimed.length, ROWS, 'every row claimed');
  });

  it('the lock-free claim statement never takes a keyed row, whatever it finds', async () => {
    await enqueue('k1');
    await enqueue();
    await enqueue('k2');
    const claimed = await db.query<{ key: string | null }>(outboxUnkeyedClaimSql('queuebox_outbox', 'RETURNING o."key"'), [
      10,
      60_000,
      null,
    ]);
    assert.deepEqual(claimed, [{ key: null }]);
  });
});
