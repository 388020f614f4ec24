import assert from 'node:assert/strict';
import { after, it } from 'node:test';
import { Client } from 'pg';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { RetentionService } from '../../lib/admin/retention.service';
import { InboxService } from '../../lib/inbox/inbox.service';
import type { QueueBoxModuleOptions } from '../../lib/types/options';
import { createTestApp, type TestApp } from '../support/app';
import { claimsOf } from '../support/claims';
import { describeWithDatabase, eventually } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

const DAY = 24 * 3600_000;
/** The documented key: hashtextextended('queuebox_retention_' || outbox table, 0). */
const LOCK = "hashtextextended('queuebox_retention_queuebox_outbox', 0)";

describeWithDatabase('retention on PostgreSQL', { truncate: ['queuebox_outbox', 'queuebox_inbox'] }, (db) => {
  const apps: TestApp[] = [];
  const app = async (retention: QueueBoxModuleOptions['retention'] = {}, workers: QueueBoxModuleOptions['workers'] = false) => {
    const t = await createTestApp(db.url, { workers, retention, outbox: { publisher: new RecordingPublisher() } });
    apps.push(t);
    return t;
  };

  after(async () => {
    await Promise.all(apps.map((t) => t.app.close()));
  });

  /** A fixture with old and recent rows in every state; returns the ids that must survive a run without dead deletion. */
  const fixture = async (oldSent: number) => {
    await db.query(
      `INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, created_at, sent_at)
       SELECT gen_random_uuid(), 'd', '{}', 'sent', 1, now() - interval '9 days', now() - interval '8 days' FROM generate_series(1, $1::int)`,
      [oldSent],
    );
    await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, created_at, sent_at, claimed_at, last_error,
        available_at, claim_token, lease_expires_at) VALUES
      (gen_random_uuid(), 'recent', '{}', 'sent', 1, now() - interval '6 days', now() - interval '6 days', NULL, NULL, now(), NULL, NULL),
      (gen_random_uuid(), 'old-pending', '{}', 'pending', 3, now() - interval '30 days', NULL, now() - interval '29 days', 'x', now(), NULL, NULL),
      (gen_random_uuid(), 'old-processing', '{}', 'processing', 1, now() - interval '30 days', NULL, now() - interval '29 days', NULL, now(),
        gen_random_uuid(), now() - interval '29 days'),
      (gen_random_uuid(), 'old-dead', '{}', 'dead', 10, now() - interval '30 days', NULL, now() - interval '20 days', 'gave up', now(), NULL, NULL),
      (gen_random_uuid(), 'recent-dead', '{}', 'dead', 10, now() - interval '30 days', NULL, now() - interval '1 hour', 'gave up', now(), NULL, NULL)`);
    await db.query(`INSERT INTO queuebox_inbox (source, idempotency_key, payload, state, attempts, received_at, processed_at, claimed_at) VALUES
      ('s', 'old-1', '{}', 'processed', 1, now() - interval '9 days', now() - interval '8 days', now() - interval '8 days'),
      ('s', 'old-2', '{}', 'processed', 1, now() - interval '9 days', now() - interval '8 days', now() - interval '8 days'),
      ('s', 'recent', '{}', 'processed', 1, now() - interval '9 days', now() - interval '1 day', now() - interval '1 day'),
      ('s', 'old-pending', '{}', 'pending', 0, now() - interval '30 days', NULL, NULL),
      ('s', 'old-dead', '{}', 'dead', 5, now() - interval '30 days', NULL, now() - interval '20 days')`);
  };
  const remaining = async () => ({
    outbox: (await db.query<{ destination: string }>("SELECT destination FROM queuebox_outbox WHERE destination <> 'd' ORDER BY id")).map(
      (r) => r.destination,
    ),
    oldSent: Number((await db.query<{ n: string }>("SELECT count(*) AS n FROM queuebox_outbox WHERE destination = 'd'"))[0].n),
    inbox: (await db.query<{ idempotency_key: string }>('SELECT idempotency_key FROM queuebox_inbox ORDER BY id')).map(
      (r) => r.idempotency_key,
    ),
  });
  const everything = ['recent', 'old-pending', 'old-processing', 'old-dead', 'recent-dead'];

  it('deletes exactly the old sent and processed rows, in batches, and keeps dead rows by default', async () => {
    await fixture(2500);
    const t = await app({ batchSize: 1000 });
    assert.deepEqual(await t.get(RetentionService).runOnce(), { outboxDeleted: 2500, inboxDeleted: 2, deadDeleted: 0, skipped: false });
    assert.deepEqual(await remaining(), { outbox: everything, oldSent: 0, inbox: ['recent', 'old-pending', 'old-dead'] });
    assert.ok(t.logger.has('log', 'Retention deleted 2500 sent outbox row(s), 2 processed inbox row(s) and 0 dead row(s)'));
    assert.deepEqual(await t.get(QueueBoxAdmin).runRetention(), { outboxDeleted: 0, inboxDeleted: 0, deadDeleted: 0, skipped: false });
  });

  it('a run asked for after stop() runs in full (stop cuts short only the run in progress)', async () => {
    await fixture(2500);
    const t = await app({ batchSize: 1000 });
    await t.get(RetentionService).stop();
    assert.equal((await t.get(RetentionService).runOnce()).outboxDeleted, 2500);
  });

  it('deletes dead rows older than deadAfterMs when configured; the inbox keeps its own, longer age', async () => {
    await fixture(3);
    const t = await app({ deadAfterMs: 7 * DAY, inboxFinishedAfterMs: 10 * DAY });
    assert.deepEqual(await t.get(RetentionService).runOnce(), { outboxDeleted: 3, inboxDeleted: 0, deadDeleted: 2, skipped: false });
    assert.deepEqual(await remaining(), {
      outbox: ['recent', 'old-pending', 'old-processing', 'recent-dead'],
      oldSent: 0,
      inbox: ['old-1', 'old-2', 'recent', 'old-pending'],
    });
  });

  it('a dead inbox row inside the dedupe window survives deadAfterMs, and a redelivery of it is still a duplicate', async () => {
    const t = await createTestApp(db.url, {
      workers: false,
      pull: { sources: ['s'] },
      retention: { deadAfterMs: 60_000, inboxFinishedAfterMs: DAY },
      outbox: { publisher: new RecordingPublisher() },
    });
    apps.push(t);
    await db.query(`INSERT INTO queuebox_inbox (source, idempotency_key, payload, state, attempts, received_at, claimed_at) VALUES
      ('s', 'young-dead', '{}', 'dead', 5, now() - interval '3 hours', now() - interval '2 hours'),
      ('s', 'old-dead', '{}', 'dead', 5, now() - interval '3 days', now() - interval '2 days')`);
    await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, created_at, claimed_at) VALUES
      (gen_random_uuid(), 'young-dead', '{}', 'dead', 5, now() - interval '3 hours', now() - interval '2 hours')`);
    assert.deepEqual(await t.get(RetentionService).runOnce(), { outboxDeleted: 0, inboxDeleted: 0, deadDeleted: 2, skipped: false });
    assert.deepEqual((await remaining()).inbox, ['young-dead'], 'the outbox dead row and the inbox one past the window are gone');
    const redelivered = await t.get(InboxService).receive({ source: 's', idempotencyKey: 'young-dead', payload: {} });
    assert.equal(redelivered.duplicate, true);
  });

  it('skips the run while another session holds the retention lock, and runs once it is released', async () => {
    await fixture(10);
    const t = await app();
    const other = new Client({ connectionString: db.url });
    await other.connect();
    try {
      await other.query(`SELECT pg_advisory_lock(${LOCK})`);
      assert.deepEqual(await t.get(RetentionService).runOnce(), { outboxDeleted: 0, inboxDeleted: 0, deadDeleted: 0, skipped: true });
      assert.equal((await remaining()).oldSent, 10, 'nothing deleted');
      assert.ok(t.logger.has('log', 'Retention skipped'));
      await other.query(`SELECT pg_advisory_unlock(${LOCK})`);
      assert.equal((await t.get(RetentionService).runOnce()).outboxDeleted, 10);
    } finally {
      await other.end();
    }
  });

  it('two replicas at once: one does the work, the other is skipped; claims go on meanwhile', async () => {
    await fixture(1500);
    await db.query("INSERT INTO queuebox_outbox (message_id, destination, payload) VALUES (gen_random_uuid(), 'claim-me', '{}')");
    const a = await app({ batchSize: 500 });
    const b = await app({ batchSize: 500 });
    // Hold replica A inside its run deterministically: a SHARE lock on the inbox blocks its inbox
    // deletes (after its outbox batches), while it holds the retention lock.
    const blocker = new Client({ connectionString: db.url });
    await blocker.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query('LOCK TABLE queuebox_inbox IN SHARE MODE');
      const runA = a.get(RetentionService).runOnce();
      await eventually(
        async () =>
          (
            await db.query(
              "SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'queuebox_inbox' AND NOT l.granted",
            )
          ).length > 0,
        'replica A waiting on its inbox delete',
      );
      assert.equal((await remaining()).oldSent, 0, 'A deleted the outbox rows in 500-row transactions already committed');
      // Bounded: without the lock, B would wait behind the same table lock instead of skipping.
      const runB = await Promise.race([
        b.get(RetentionService).runOnce(),
        new Promise((resolve) => setTimeout(() => resolve('still running after 5 s'), 5000)),
      ]);
      assert.deepEqual(runB, { outboxDeleted: 0, inboxDeleted: 0, deadDeleted: 0, skipped: true });
      const claims = await claimsOf(b).outbox.claim({ limit: 10, leaseMs: 60_000 });
      assert.deepEqual(
        claims.map((c) => c.message.destination),
        ['old-pending', 'claim-me'],
        'a claim does not wait for retention',
      );
      await blocker.query('COMMIT');
      assert.deepEqual(await runA, { outboxDeleted: 1500, inboxDeleted: 2, deadDeleted: 0, skipped: false });
    } finally {
      await blocker.query('ROLLBACK').catch(() => undefined);
      await blocker.end();
    }
  });

  it('runs on a timer only where a worker runs, and stops with the application', async () => {
    await fixture(5);
    const web = await app({ enabled: true, intervalMs: 1000 }, false);
    assert.equal(web.logger.has('log', 'Retention started'), false, 'no timer without workers');
    const worker = await app({ enabled: true, intervalMs: 1000 }, { outbox: true, relay: false, pull: false });
    assert.ok(worker.logger.has('log', 'Retention started'));
    await eventually(async () => (await remaining()).oldSent === 0, 'the timer deleting old rows', 10_000);
    await worker.app.close();
    apps.splice(apps.indexOf(worker), 1);
    await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, sent_at)
      SELECT gen_random_uuid(), 'd', '{}', 'sent', 1, now() - interval '8 days' FROM generate_series(1, 5)`);
    await new Promise((resolve) => setTimeout(resolve, 1500));
    assert.equal((await remaining()).oldSent, 5, 'no run after close');
    assert.equal(worker.logger.has('error', 'Retention'), false, 'no timer left to fire on a closed DataSource');
  });
});
