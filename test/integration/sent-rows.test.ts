// Issue 36 target 2: `outbox.sentRows: 'delete'`. The fenced completion deletes a sent row (and its
// attempt history) instead of marking it `sent`; a lost claim deletes nothing; dead rows stay; the
// reads of sent rows are refused with a typed error, and the history says it has no sent counts.
// The chaos suite (test/chaos/outbox.test.ts) runs the same mode under kill -9, pauses past the
// lease, backend terminations, out-of-order commits and poison.
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { createQueueBoxAdmin } from '../../lib/admin/create-queuebox-admin';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { PermanentPublishError, PublishError, SentRowsNotKeptError } from '../../lib/errors/queuebox.errors';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { createTestApp, type TestApp } from '../support/app';
import { claimsOf, type TestClaims } from '../support/claims';
import { describeWithDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

const TABLES = ['queuebox_outbox', 'queuebox_outbox_attempts'];
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describeWithDatabase("outbox.sentRows: 'delete'", { truncate: TABLES }, (db) => {
  let t: TestApp;
  let take: TestClaims;
  let dataSource: DataSource;
  const failedOnce = new Set<string>();
  const publisher = new RecordingPublisher((message) => {
    const name = (message.payload as { name: string }).name;
    if (name === 'poison') throw new PermanentPublishError('the partner refuses it');
    if (name === 'flaky' && !failedOnce.has(name)) {
      failedOnce.add(name);
      throw new PublishError('HTTP 503 from the partner', 503);
    }
  });

  before(async () => {
    t = await createTestApp(db.url, {
      workers: false,
      outbox: { publisher, sentRows: 'delete', retry: { attempts: 5, backoff: () => 0 } },
    });
    take = claimsOf(t);
    dataSource = t.app.get(getDataSourceToken());
  });
  after(async () => {
    await t?.app.close();
  });

  const enqueue = (messages: { name: string; key?: string }[]) =>
    dataSource.transaction(async (manager) => {
      for (const { name, key } of messages) await t.get(OutboxService).enqueue(manager, { destination: 'd', key, payload: { name } });
    });
  const rows = () => db.query<{ name: string; state: string }>("SELECT payload->>'name' AS name, state FROM queuebox_outbox ORDER BY id");
  const history = async () => (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM queuebox_outbox_attempts'))[0].n;

  it('deletes each sent row and its attempt history; a dead row stays, with its history', async () => {
    await enqueue([{ name: 'a' }, { name: 'k1', key: 'k' }, { name: 'k2', key: 'k' }, { name: 'flaky' }, { name: 'poison' }]);
    for (let round = 0; round < 20 && (await t.get(OutboxPoller).runOnce()) > 0; round++);
    const sent = publisher.delivered.map((m) => (m.payload as { name: string }).name);
    assert.deepEqual([...sent].sort(), ['a', 'flaky', 'k1', 'k2']);
    assert.ok(sent.indexOf('k1') < sent.indexOf('k2'), 'rows of one key in order');
    assert.deepEqual(await rows(), [{ name: 'poison', state: 'dead' }], 'only the dead row is left');
    const kept = await db.query<{ name: string }>(
      "SELECT o.payload->>'name' AS name FROM queuebox_outbox_attempts a JOIN queuebox_outbox o ON o.id = a.row_id",
    );
    assert.deepEqual(
      kept.map((r) => r.name),
      ['poison'],
      "the flaky row's failed attempt went with its row; the dead row keeps its own",
    );
    assert.equal(await history(), 1);
  });

  it('a completion whose claim is lost (another token, an expired lease) deletes nothing, single or batched', async () => {
    await enqueue([{ name: 'own' }, { name: 'stolen' }, { name: 'expired' }, { name: 'batch-own' }, { name: 'batch-stolen' }]);
    const claims = await take.outbox.claim({ limit: 5, leaseMs: 60_000 });
    const byName = new Map(claims.map((c) => [(c.message.payload as { name: string }).name, c]));
    const claim = (name: string) => byName.get(name) ?? assert.fail(`${name} was not claimed`);
    const otherToken = '00000000-0000-4000-8000-000000000000';

    assert.equal(await take.lease.complete(claim('own')), true);
    assert.equal(await take.lease.complete({ ...claim('stolen'), token: otherToken }), false, 'another token');
    // The lease ends by the database clock: moved into the past, as a pause past the lease leaves it.
    await db.query("UPDATE queuebox_outbox SET lease_expires_at = now() - interval '1 second' WHERE id = $1", [claim('expired').id]);
    assert.equal(await take.lease.complete(claim('expired')), false, 'an expired lease');
    const done = await take.lease.completeBatch([claim('batch-own'), { ...claim('batch-stolen'), token: otherToken }]);
    assert.deepEqual(
      [...done].map((c) => (c.message.payload as { name: string }).name),
      ['batch-own'],
    );
    assert.deepEqual(await rows(), [
      { name: 'stolen', state: 'processing' },
      { name: 'expired', state: 'processing' },
      { name: 'batch-stolen', state: 'processing' },
    ]);
  });

  it('refuses a search for sent rows with SentRowsNotKeptError; the history and throughput say they have no sent counts', async () => {
    const admin = t.get(QueueBoxAdmin);
    await assert.rejects(admin.findMessages({ component: 'outbox', state: 'sent' }), (error: unknown) => {
      assert.ok(error instanceof SentRowsNotKeptError);
      assert.equal(error.code, 'QUEUEBOX_SENT_ROWS_NOT_KEPT');
      assert.match(error.message, /outbox\.sentRows: 'delete'/);
      assert.match(error.message, /queuebox_outbox_messages_sent_total/);
      return true;
    });
    await enqueue([{ name: 'in flight' }]);
    await take.outbox.claim({ limit: 1, leaseMs: 60_000 });
    const processing = await admin.findMessages({ component: 'outbox', state: 'processing' });
    assert.equal(processing.rows.length, 1, 'other states are searched as before');
    assert.deepEqual((await admin.findMessages({ component: 'inbox', state: 'processed' })).rows, [], 'the inbox keeps its rows');
    assert.equal((await admin.history()).sentRowsKept, false);
    assert.equal((await admin.throughput()).sentRowsKept, false);

    // A script's admin knows only what it is told.
    const told = await createQueueBoxAdmin(dataSource, { outbox: { sentRows: 'delete' } });
    await assert.rejects(told.findMessages({ component: 'outbox', state: 'sent' }), SentRowsNotKeptError);
    const untold = await createQueueBoxAdmin(dataSource);
    assert.deepEqual((await untold.findMessages({ component: 'outbox', state: 'sent' })).rows, []);
    assert.equal((await untold.throughput()).sentRowsKept, true);
  });
});

describeWithDatabase("outbox.sentRows: 'keep' (the default)", { truncate: TABLES }, (db) => {
  it('marks a sent row sent and keeps it; the admin reads it', async () => {
    const publisher = new RecordingPublisher();
    const t = await createTestApp(db.url, { workers: false, outbox: { publisher } });
    try {
      const dataSource = t.app.get<DataSource>(getDataSourceToken());
      await dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'd', payload: { name: 'kept' } }));
      await t.get(OutboxPoller).runOnce();
      await sleep(0);
      assert.equal(publisher.delivered.length, 1);
      const admin = t.get(QueueBoxAdmin);
      assert.equal((await admin.findMessages({ component: 'outbox', state: 'sent' })).rows.length, 1);
      assert.equal((await admin.history()).sentRowsKept, true);
    } finally {
      await t.app.close();
    }
  });
});
