import assert from 'node:assert/strict';
import { after, afterEach, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { createQueueBoxAdmin } from '../../lib/admin/create-queuebox-admin';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { QueueBoxHealth } from '../../lib/health/queuebox-health';
import { InboxService } from '../../lib/inbox/inbox.service';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { InboxMessage } from '../../lib/types/messages';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually, testDatabases } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

// Issue 40: pause and resume an outbox destination or an inbox source. The pauses live in the
// database (migration 010); every replica's claims read them at most once per poll interval and
// skip the paused rows, which stay pending and keep holding back the later rows of their keys.

const POLL_MS = 200;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const handled: string[] = [];

@Injectable()
class LedgerHandler {
  @PullHandler('ledger', { leaseMs: 10_000 })
  async handle(message: InboxMessage) {
    handled.push(message.idempotencyKey);
  }
}

describeWithDatabase('pauses', { truncate: ['queuebox_outbox', 'queuebox_inbox', 'queuebox_outbox_pauses'] }, (db) => {
  const apps: TestApp[] = [];
  const newDatabase = testDatabases();
  const start = async (publisher: RecordingPublisher, extra: Record<string, unknown> = {}) => {
    const app = await createTestApp(db.url, {
      outbox: { publisher, pollIntervalMs: POLL_MS, backoff: { initialMs: 5, maxMs: 5, jitter: false } },
      ...extra,
    });
    apps.push(app);
    return app;
  };
  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.app.close()));
    handled.length = 0;
  });
  after(async () => {
    await Promise.all(apps.splice(0).map((app) => app.app.close()));
  });

  const enqueue = (app: TestApp, messages: { destination: string; key?: string; payload: unknown }[]) =>
    app.app.get<DataSource>(getDataSourceToken()).transaction(async (manager) => {
      for (const message of messages) await app.get(OutboxService).enqueue(manager, message);
    });
  const pendingOf = async (destination: string) =>
    Number(
      (
        await db.query<{ n: string }>(`SELECT count(*) AS n FROM queuebox_outbox WHERE destination = $1 AND state = 'pending'`, [
          destination,
        ])
      )[0].n,
    );

  it('a pause written through one replica stops the claims of both replicas within one poll interval; a resume through the other delivers the rows', async () => {
    const publishers = [new RecordingPublisher(), new RecordingPublisher()];
    const [a, b] = [await start(publishers[0]), await start(publishers[1])];
    const delivered = (destination: string) =>
      publishers.flatMap((p) => p.delivered).filter((message) => message.destination === destination).length;
    // Both replicas have claimed (and read the pauses) before the pause.
    await enqueue(a, [{ destination: 'billing', payload: 0 }]);
    await eventually(async () => delivered('billing') === 1, 'the first message delivered');

    assert.equal(await a.get(QueueBoxAdmin).pause({ component: 'outbox', name: 'billing', reason: 'partner down', actor: 'alice' }), true);
    const [row] = await b.get(QueueBoxAdmin).pauses();
    assert.deepEqual(
      { component: row.component, name: row.name, reason: row.reason, pausedBy: row.pausedBy },
      { component: 'outbox', name: 'billing', reason: 'partner down', pausedBy: 'alice' },
    );
    assert.ok(Math.abs(row.pausedAt.getTime() - Date.now()) < 60_000, 'paused_at is now, by the database clock');
    const logged = () => apps.flatMap((app) => app.logger.lines.map((line) => line.message));
    // One poll interval later every replica honours it: nothing of billing is claimed, shipping flows.
    await sleep(POLL_MS + 50);
    await enqueue(b, [
      ...Array.from({ length: 5 }, (_, i) => ({ destination: 'billing', payload: i + 1 })),
      ...Array.from({ length: 5 }, (_, i) => ({ destination: 'shipping', payload: i })),
    ]);
    await eventually(async () => delivered('shipping') === 5, 'shipping delivered while billing is paused');
    await sleep(3 * POLL_MS);
    assert.equal(delivered('billing'), 1, 'no replica published a message of the paused destination');
    assert.equal(await pendingOf('billing'), 5, 'the paused rows wait, pending');
    assert.ok(
      logged().some((line) => line.startsWith('Destination "billing" of the outbox is paused (by "alice": "partner down")')),
      'a process logs the pause it sees, with who and why',
    );
    // Only now does b's admin write (its own claims would see that at once): until here b learnt of the pause by its own read.
    assert.equal(
      await b.get(QueueBoxAdmin).pause({ component: 'outbox', name: 'billing', actor: 'bob' }),
      false,
      'the first pause is kept',
    );
    assert.equal((await b.get(QueueBoxAdmin).pauses())[0].pausedBy, 'alice');

    assert.equal(await b.get(QueueBoxAdmin).resume({ component: 'outbox', name: 'billing', actor: 'bob' }), true);
    assert.equal(await a.get(QueueBoxAdmin).resume({ component: 'outbox', name: 'billing' }), false, 'resumed already');
    await eventually(async () => delivered('billing') === 6, 'billing delivered after the resume');
    // Logged by the next read of a process that saw the pause: a claim may run on a read that an
    // admin call of its own process overtook (a's resume above, which found nothing to resume), and
    // such a read is not logged, so the line can come after the delivery.
    await eventually(
      async () => logged().some((line) => line.startsWith('Destination "billing" of the outbox is no longer paused')),
      'a process logs the resume it saw',
    );
    assert.deepEqual(await a.get(QueueBoxAdmin).pauses(), []);
  });

  it('keeps the order of a key whose head is paused: its later rows of other destinations wait, and after the resume all go out in order', async () => {
    const publisher = new RecordingPublisher();
    const app = await start(publisher);
    await app.get(QueueBoxAdmin).pause({ component: 'outbox', name: 'billing', actor: 'test' });
    await sleep(POLL_MS + 50); // a claim whose read of the pauses came before the pause may still run: wait it out
    await enqueue(app, [
      { destination: 'billing', key: 'order-1', payload: 1 },
      { destination: 'shipping', key: 'order-1', payload: 2 },
      { destination: 'billing', key: 'order-1', payload: 3 },
      { destination: 'shipping', key: 'order-1', payload: 4 },
      { destination: 'shipping', key: 'order-2', payload: 'other key' },
      { destination: 'shipping', payload: 'no key' },
    ]);
    await eventually(async () => publisher.delivered.length === 2, 'the other key and the unkeyed row delivered');
    await sleep(3 * POLL_MS);
    assert.deepEqual(publisher.delivered.map((m) => m.payload).sort(), ['no key', 'other key']);

    await app.get(QueueBoxAdmin).resume({ component: 'outbox', name: 'billing', actor: 'test' });
    await eventually(async () => publisher.delivered.length === 6, 'the key delivered after the resume');
    assert.deepEqual(
      publisher.delivered.filter((m) => m.key === 'order-1').map((m) => m.payload),
      [1, 2, 3, 4],
      'the key went out in enqueue order',
    );
  });

  it('a paused source is claimed neither by the relay nor by a pull handler; resumed, both consume it', async () => {
    const publisher = new RecordingPublisher();
    const app = await createTestApp(
      db.url,
      {
        outbox: { publisher, pollIntervalMs: POLL_MS },
        inbox: {
          relay: {
            pollIntervalMs: POLL_MS,
            routes: { orders: (message) => ({ destination: 'billing', key: message.aggregateId, payload: message.payload }) },
          },
        },
        pull: { pollIntervalMs: POLL_MS },
      },
      { providers: [LedgerHandler] },
    );
    apps.push(app);
    const admin = app.get(QueueBoxAdmin);
    await admin.pause({ component: 'inbox', name: 'orders', actor: 'test' });
    await admin.pause({ component: 'inbox', name: 'ledger', actor: 'test' });
    await sleep(POLL_MS + 50); // a claim whose read of the pauses came before the pause may still run: wait it out
    const inbox = app.get(InboxService);
    for (let i = 0; i < 3; i++) {
      await inbox.receive({ source: 'orders', idempotencyKey: `o-${i}`, aggregateId: 'order-1', payload: i });
      await inbox.receive({ source: 'ledger', idempotencyKey: `l-${i}`, payload: i });
    }
    await sleep(4 * POLL_MS);
    assert.equal(publisher.delivered.length, 0, 'the relay forwarded nothing of the paused source');
    assert.deepEqual(handled, [], 'the pull handler took nothing of the paused source');
    const health = await app.get(QueueBoxHealth).check({ maxLagMs: 1 });
    assert.deepEqual(
      health.paused?.map((p) => `${p.component}:${p.name}`),
      ['inbox:ledger', 'inbox:orders'],
    );
    assert.ok(
      !health.problems.some((problem) => /ledger|orders/.test(problem)),
      `a deliberate pause is no lag problem: ${health.problems}`,
    );

    await admin.resume({ component: 'inbox', name: 'orders', actor: 'test' });
    await admin.resume({ component: 'inbox', name: 'ledger', actor: 'test' });
    await eventually(async () => publisher.delivered.length === 3 && handled.length === 3, 'both consumed after the resume');
    assert.deepEqual(
      publisher.delivered.map((m) => m.payload),
      [0, 1, 2],
    );
  });

  it('passes over a paused name holding quotes, a backslash, braces and a comma exactly, and no other', async () => {
    const publisher = new RecordingPublisher();
    const app = await start(publisher);
    const odd = `we'ird"\\{na,me} `;
    await app.get(QueueBoxAdmin).pause({ component: 'outbox', name: odd, actor: 'test' });
    await sleep(POLL_MS + 50);
    await enqueue(app, [
      { destination: odd, payload: 'odd' },
      { destination: odd.trim(), payload: 'trimmed' },
      { destination: 'we', payload: 'prefix' },
    ]);
    await eventually(async () => publisher.delivered.length === 2, 'the names that are not paused delivered');
    await sleep(3 * POLL_MS);
    assert.deepEqual(publisher.delivered.map((m) => m.payload).sort(), ['prefix', 'trimmed']);
    await app.get(QueueBoxAdmin).resume({ component: 'outbox', name: odd, actor: 'test' });
    await eventually(async () => publisher.delivered.length === 3, 'the paused name delivered after the resume');
  });

  it('a database without the pauses table (migration 010 not run) is refused at start-up, naming the migration', async () => {
    const own = await newDatabase();
    await own.query('DROP TABLE queuebox_outbox_pauses');
    const dataSource = new DataSource({ type: 'postgres', url: own.url, logging: false });
    await dataSource.initialize();
    try {
      await assert.rejects(
        createQueueBoxAdmin(dataSource),
        /"queuebox_outbox_pauses" does not exist: this version needs migration QueueBoxPauses1796601600000/,
      );
    } finally {
      await dataSource.destroy();
    }
  });

  it('refuses a bad component or name, naming the field, and writes nothing', async () => {
    const app = await start(new RecordingPublisher(), { workers: false });
    const admin = app.get(QueueBoxAdmin);
    await assert.rejects(admin.pause({ component: 'queue' as never, name: 'x' }), /"component" must be "outbox" or "inbox"/);
    await assert.rejects(admin.pause({ component: 'outbox', name: '' }), /"name" must be a destination or source name/);
    await assert.rejects(admin.pause({ component: 'outbox', name: 'x'.repeat(256) }), /"name" must be a destination or source name/);
    await assert.rejects(admin.resume({ component: 'outbox', name: 42 as never }), /"name"/);
    assert.deepEqual(await admin.pauses(), []);
  });
});
