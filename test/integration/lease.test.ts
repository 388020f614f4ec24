import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { LeaseService } from '../../lib/lease/lease.service';
import { QueueBoxMetrics } from '../../lib/metrics/queuebox.metrics';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { createTestApp, type TestApp } from '../support/app';
import { claimsOf, type TestClaims } from '../support/claims';
import { describeWithDatabase } from '../support/database';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describeWithDatabase('LeaseService on PostgreSQL', { truncate: ['queuebox_outbox'] }, (db) => {
  let t: TestApp;
  let lease: LeaseService;
  let take: TestClaims;
  let outbox: OutboxService;
  let metrics: QueueBoxMetrics;
  let dataSource: DataSource;

  before(async () => {
    t = await createTestApp(db.url, { workers: false });
    lease = t.get(LeaseService);
    take = claimsOf(t);
    outbox = t.get(OutboxService);
    metrics = t.get(QueueBoxMetrics);
    dataSource = t.app.get(getDataSourceToken());
  });
  after(async () => {
    await t?.app.close();
  });

  const enqueueOne = (key?: string) =>
    dataSource.transaction((manager) => outbox.enqueue(manager, { destination: 'd', key, payload: { n: 1 } }));
  const rowOf = async (id: string) =>
    (
      await db.query<{ state: string; claim_token: string | null; attempts: number; last_error: string | null }>(
        'SELECT state, claim_token, attempts, last_error FROM queuebox_outbox WHERE id = $1',
        [id],
      )
    )[0];

  it('claims with a token and a database-clock lease, and counts the claim as an attempt', async () => {
    const { id } = await enqueueOne();
    const dbNow = new Date((await db.query<{ now: Date }>('SELECT clock_timestamp() AS now'))[0].now);
    const [claim] = await take.outbox.claim({ limit: 10, leaseMs: 60_000 });
    assert.equal(claim.id, id);
    assert.equal(claim.attempt, 1);
    const leaseLeft = claim.leaseExpiresAt.getTime() - dbNow.getTime();
    assert.ok(leaseLeft > 59_000 && leaseLeft < 61_000, `lease ends ${leaseLeft} ms after the database's now`);
    const row = await rowOf(id);
    assert.equal(row.state, 'processing');
    assert.equal(row.claim_token, claim.token);
    assert.equal(row.attempts, 1);
    assert.deepEqual(await take.outbox.claim({ limit: 10, leaseMs: 60_000 }), [], 'a claimed row is not claimed twice');
  });

  it('I3: a zombie whose lease expired and whose row was claimed again changes nothing', async () => {
    const { id } = await enqueueOne('k');
    const lostBefore = metrics.value('queuebox_claims_lost_total', { component: 'outbox' });
    const [zombie] = await take.outbox.claim({ limit: 1, leaseMs: 150 });
    await sleep(250);
    assert.deepEqual(await take.outbox.reclaim({ maxAttempts: 10 }), { pending: 1, dead: 0, byName: [{ name: 'd', pending: 1, dead: 0 }] });
    const [owner] = await take.outbox.claim({ limit: 1, leaseMs: 60_000 });
    assert.equal(owner.id, id);
    assert.notEqual(owner.token, zombie.token);

    assert.equal(await lease.renew(zombie), false);
    assert.equal(await lease.complete(zombie), false);
    assert.equal(await lease.retry(zombie, { delayMs: 0, error: new Error('zombie') }), false);
    assert.equal(await lease.deadLetter(zombie, 'zombie'), false);
    const row = await rowOf(id);
    assert.equal(row.state, 'processing');
    assert.equal(row.claim_token, owner.token, 'the new owner keeps the row');
    assert.equal(metrics.value('queuebox_claims_lost_total', { component: 'outbox' }), lostBefore + 1, 'counted once per lost claim');

    assert.equal(await lease.complete(owner), true);
    assert.equal((await rowOf(id)).state, 'sent');
  });

  it('I3: an expired lease fails the fence even before anyone reclaims the row', async () => {
    await enqueueOne();
    const [claim] = await take.outbox.claim({ limit: 1, leaseMs: 100 });
    await sleep(200);
    assert.equal(await lease.complete(claim), false);
    assert.equal((await rowOf(claim.id)).state, 'processing');
  });

  it('renew moves the lease forward by the database clock and keeps the claim alive past its first lease', async () => {
    await enqueueOne();
    const [claim] = await take.outbox.claim({ limit: 1, leaseMs: 300 });
    const first = claim.leaseExpiresAt.getTime();
    for (let i = 0; i < 4; i++) {
      await sleep(100);
      assert.equal(await lease.renew(claim), true);
    }
    assert.ok(claim.leaseExpiresAt.getTime() > first + 300);
    assert.equal(await lease.complete(claim), true);
  });

  it('completeBatch completes many claims in one fenced statement and reports the lost one', async () => {
    for (let n = 0; n < 3; n++) await enqueueOne();
    const claims = await take.outbox.claim({ limit: 3, leaseMs: 60_000 });
    assert.equal(claims.length, 3);
    await db.query('UPDATE queuebox_outbox SET claim_token = gen_random_uuid() WHERE id = $1', [claims[1].id]);
    const lostBefore = metrics.value('queuebox_claims_lost_total', { component: 'outbox' });
    const completed = await lease.completeBatch(claims);
    assert.deepEqual(
      claims.map((c) => completed.has(c)),
      [true, false, true],
    );
    assert.equal(metrics.value('queuebox_claims_lost_total', { component: 'outbox' }), lostBefore + 1);
    assert.deepEqual(
      (await db.query<{ state: string }>('SELECT state FROM queuebox_outbox ORDER BY id')).map((r) => r.state),
      ['sent', 'processing', 'sent'],
    );
  });

  it('release gives an unstarted claim back without counting its attempt', async () => {
    const { id } = await enqueueOne();
    const [claim] = await take.outbox.claim({ limit: 1, leaseMs: 60_000 });
    assert.equal(await lease.release(claim), true);
    const row = await rowOf(id);
    assert.deepEqual([row.state, row.attempts, row.claim_token], ['pending', 0, null]);
    assert.equal(await lease.release(claim), false, 'fenced like every finishing write');
  });

  it('retry returns the row to pending, available after the delay, with the error recorded', async () => {
    const { id } = await enqueueOne();
    const [claim] = await take.outbox.claim({ limit: 1, leaseMs: 60_000 });
    assert.equal(await lease.retry(claim, { delayMs: 60_000, error: new Error('broker down') }), true);
    const row = await rowOf(id);
    assert.equal(row.state, 'pending');
    assert.equal(row.claim_token, null);
    assert.equal(row.last_error, 'Error: broker down');
    assert.deepEqual(await take.outbox.claim({ limit: 1, leaseMs: 60_000 }), [], 'not available before the delay');
    await db.query("UPDATE queuebox_outbox SET available_at = now() - interval '1 second'");
    const [again] = await take.outbox.claim({ limit: 1, leaseMs: 60_000 });
    assert.equal(again.attempt, 2);
    assert.equal(await lease.deadLetter(again, 'gave up'), true);
    assert.equal((await rowOf(id)).state, 'dead');
  });

  it('I7: the lease is decided by the database clock when the application clock is far ahead', async (t) => {
    await enqueueOne();
    const [claim] = await take.outbox.claim({ limit: 1, leaseMs: 60_000 });
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() + 24 * 3600_000 });
    assert.ok(Date.now() > claim.leaseExpiresAt.getTime(), 'by the application clock the lease has expired');
    assert.equal(await lease.renew(claim), true, 'the database clock says it has not');
    assert.equal(await lease.complete(claim), true);
  });

  it('I7: and when the application clock is far behind, an expired lease still fails the fence', async (t) => {
    await enqueueOne();
    const [claim] = await take.outbox.claim({ limit: 1, leaseMs: 100 });
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() - 24 * 3600_000 });
    await sleep(200);
    assert.ok(Date.now() < claim.leaseExpiresAt.getTime(), 'by the application clock the lease is still valid');
    assert.equal(await lease.complete(claim), false);
  });

  it('I7: a fence evaluated late in a long transaction uses the current time, not the transaction start', async () => {
    await enqueueOne();
    const [claim] = await take.outbox.claim({ limit: 1, leaseMs: 300 });
    const completed = await dataSource.transaction(async (manager) => {
      await manager.query('SELECT 1'); // the transaction has started: now() is fixed from here
      await sleep(450);
      return lease.complete(claim, manager);
    });
    assert.equal(completed, false, 'the lease expired while the transaction ran');
    assert.equal((await rowOf(claim.id)).state, 'processing');
  });

  it('complete joins the caller transaction and rolls back with it', async () => {
    await enqueueOne();
    const [claim] = await take.outbox.claim({ limit: 1, leaseMs: 60_000 });
    await assert.rejects(
      dataSource.transaction(async (manager) => {
        assert.equal(await lease.complete(claim, manager), true);
        throw new Error('business write failed');
      }),
      /business write failed/,
    );
    assert.equal((await rowOf(claim.id)).state, 'processing');
    assert.equal(await lease.complete(claim), true);
  });

  it('I8: reclaim dead-letters a row that expired on its last attempt', async () => {
    const { id } = await enqueueOne();
    for (let attempt = 1; attempt <= 3; attempt++) {
      const [claim] = await take.outbox.claim({ limit: 1, leaseMs: 50 });
      assert.equal(claim.attempt, attempt);
      await sleep(100);
      const reclaimed = await take.outbox.reclaim({ maxAttempts: 3 });
      assert.deepEqual(
        { pending: reclaimed.pending, dead: reclaimed.dead },
        attempt < 3 ? { pending: 1, dead: 0 } : { pending: 0, dead: 1 },
      );
      const deadLettered = metrics.value('queuebox_outbox_messages_dead_lettered_total', { destination: 'd', cause: 'reclaim' });
      assert.equal(deadLettered, attempt < 3 ? 0 : 1, 'a row dying on the reclaim step is counted as dead-lettered');
    }
    const row = await rowOf(id);
    assert.equal(row.state, 'dead');
    assert.match(row.last_error ?? '', /lease expired on attempt 3 of 3/);
  });

  it('keeps renewing while work runs, and aborts the signal when the claim is lost', async () => {
    await enqueueOne();
    const [claim] = await take.outbox.claim({ limit: 1, leaseMs: 300 });
    const keeper = lease.keep(claim);
    await sleep(700);
    assert.equal(keeper.signal.aborted, false, 'renewals kept a 300 ms lease alive for 700 ms');
    const aborted = new Promise((resolve) => keeper.signal.addEventListener('abort', resolve));
    await db.query('UPDATE queuebox_outbox SET claim_token = gen_random_uuid() WHERE id = $1', [claim.id]);
    await aborted;
    assert.equal(keeper.lost, true);
    assert.equal(keeper.signal.reason?.name, 'ClaimLostError');
    await keeper.stop();
  });
});
