import assert from 'node:assert/strict';
import { after, beforeEach, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import { Client } from 'pg';
import type { DataSource } from 'typeorm';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { QUEUEBOX_DIALECT } from '../../lib/common/queuebox.constants';
import type { Dialect } from '../../lib/dialects/dialect';
import { QueueBoxEvents } from '../../lib/events/queuebox.events';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import type { OutboxOptions } from '../../lib/types/options';
import type { OutboxMessageInput } from '../../lib/types/outbox';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase } from '../support/database';
import { gate, RecordingPublisher } from '../support/recording-publisher';

/**
 * Outbox followers (issue 36, `outbox.maxFollowers`): the rows of a claimed head's key right after
 * it are published after it, in its slot and under its claim, and marked sent with it in one
 * statement. One `runOnce` claims one batch: a key's rows beyond its head can only go out in it as
 * followers, so what one `runOnce` publishes shows what the followers did.
 */
describeWithDatabase(
  'OutboxPoller: followers of a claimed key (PostgreSQL)',
  { truncate: ['queuebox_outbox', 'queuebox_outbox_pauses', 'queuebox_outbox_rate_limits'] },
  (db) => {
    let publisher: RecordingPublisher;
    let t: TestApp | undefined;
    let outbox: OutboxService;
    let poller: OutboxPoller;
    let dataSource: DataSource;

    async function start(options: Partial<OutboxOptions> = {}, root: { sentRows?: 'keep' | 'delete'; loop?: boolean } = {}): Promise<void> {
      await t?.app.close();
      publisher = new RecordingPublisher();
      t = await createTestApp(db.url, {
        outbox: {
          publishers: { billing: publisher, audit: publisher },
          pollIntervalMs: 20,
          claimTimeoutMs: 5000,
          maxAttempts: 3,
          backoff: { initialMs: 10, maxMs: 10, jitter: false },
          sentRows: root.sentRows,
          ...options,
        },
        workers: root.loop ? { outbox: true, relay: false, pull: false } : false,
      });
      outbox = t.get(OutboxService);
      poller = t.get(OutboxPoller);
      dataSource = t.app.get(getDataSourceToken());
    }

    beforeEach(async () => {
      await start();
    });
    after(async () => {
      await t?.app.close();
    });

    /** Enqueues `count` messages of `key` (payload `{ key, seq }`), in one transaction. */
    const enqueue = (key: string, count: number, destination = 'billing', from = 0) =>
      dataSource.transaction((manager) =>
        outbox.enqueueMany(
          manager,
          Array.from({ length: count }, (_, i): OutboxMessageInput => ({ destination, key, payload: { key, seq: from + i } })),
        ),
      );
    const logged = (level: string) => (t?.logger.lines ?? []).filter((line) => line.level === level).map((line) => line.message);
    const published = () => publisher.delivered.map((m) => `${(m.payload as { key: string }).key}:${(m.payload as { seq: number }).seq}`);
    const rows = async () =>
      await db.query<{ seq: number; state: string; attempts: number; claimed_by: string | null }>(
        "SELECT (payload->>'seq')::int AS seq, state, attempts, claimed_by::text FROM queuebox_outbox ORDER BY id",
      );

    it("publishes a key's rows after its head, in order, in one claim, and marks them sent with it", async () => {
      await enqueue('a', 6);
      await enqueue('b', 3);
      const events: string[] = [];
      t?.get(QueueBoxEvents).on('queuebox:published', (event) => events.push(event.messageId));
      assert.equal(await poller.runOnce(), 2, 'one claim takes the two heads');
      assert.deepEqual(
        published().filter((m) => m.startsWith('a')),
        ['a:0', 'a:1', 'a:2', 'a:3', 'a:4', 'a:5'],
      );
      assert.deepEqual(
        published().filter((m) => m.startsWith('b')),
        ['b:0', 'b:1', 'b:2'],
      );
      const after = await rows();
      assert.ok(
        after.every((row) => row.state === 'sent' && row.attempts === 1),
        JSON.stringify(after),
      );
      // A follower is finished as its head's claim: by the same instance.
      assert.equal(new Set(after.map((row) => row.claimed_by)).size, 1);
      assert.equal(events.length, 9, 'one published event per message, followers included');
      // Both heads' runs ended in the same turn: one statement (one transaction) completed them all.
      const [{ transactions }] = await db.query<{ transactions: number }>(
        'SELECT count(DISTINCT xmin::text)::int AS transactions FROM queuebox_outbox',
      );
      assert.equal(transactions, 1);
    });

    it('with maxFollowers 0, a claim publishes its heads only', async () => {
      await start({ maxFollowers: 0 });
      await enqueue('a', 4);
      assert.equal(await poller.runOnce(), 1);
      assert.deepEqual(published(), ['a:0']);
      assert.deepEqual(
        (await rows()).map((row) => row.state),
        ['sent', 'pending', 'pending', 'pending'],
      );
    });

    it('holds at most maxFollowers: one claim reads at most half of them, shared between its heads', async () => {
      await start({ maxFollowers: 4 });
      await enqueue('a', 5);
      await enqueue('b', 5);
      await poller.runOnce();
      // Two heads and half of 4 followers: one behind each head.
      assert.deepEqual(published().sort(), ['a:0', 'a:1', 'b:0', 'b:1']);
    });

    it('stops at a follower that fails: it stays pending, its attempt not counted, and goes next as a head of its own', async () => {
      await enqueue('a', 5);
      publisher.behaviour = (message) => {
        if ((message.payload as { seq: number }).seq === 2 && message.attempt === 1) throw new Error('broker said no');
      };
      await poller.runOnce();
      assert.deepEqual(published(), ['a:0', 'a:1']);
      assert.deepEqual(
        (await rows()).map((row) => `${row.state}/${row.attempts}`),
        ['sent/1', 'sent/1', 'pending/0', 'pending/0', 'pending/0'],
      );
      assert.ok(logged('warn').some((line) => line.includes('a follower of its key') && line.includes('broker said no')));
      // Its next attempt is a claim: attempt 1, as the failing publish saw (the failure was not charged).
      publisher.behaviour = () => undefined;
      await poller.runOnce();
      assert.deepEqual(published(), ['a:0', 'a:1', 'a:2', 'a:3', 'a:4']);
      assert.ok((await rows()).every((row) => row.state === 'sent' && row.attempts === 1));
    });

    it('a run stops before a row of a paused destination, which waits, with the rows after it', async () => {
      await enqueue('a', 2, 'billing', 0);
      await enqueue('a', 1, 'audit', 2);
      await enqueue('a', 1, 'billing', 3);
      assert.equal(await (t as TestApp).get(QueueBoxAdmin).pause({ component: 'outbox', name: 'audit' }), true);
      await poller.runOnce();
      assert.deepEqual(published(), ['a:0', 'a:1']);
      assert.deepEqual(
        (await rows()).map((row) => row.state),
        ['sent', 'sent', 'pending', 'pending'],
      );
    });

    it('a run stops before a row of a rate-limited destination: it is claimed as a head and takes its token', async () => {
      await start({ rateLimits: { audit: { limit: 100, per: '1s', burst: 100 } } });
      await enqueue('a', 2, 'billing', 0);
      await enqueue('a', 2, 'audit', 2);
      await poller.runOnce();
      assert.deepEqual(published(), ['a:0', 'a:1']);
      // The audit row goes as a head, with a token of its bucket; the next audit row is not taken
      // behind it either, but claimed on its own.
      await poller.runOnce();
      assert.deepEqual(published(), ['a:0', 'a:1', 'a:2']);
      await poller.runOnce();
      assert.deepEqual(published(), ['a:0', 'a:1', 'a:2', 'a:3']);
    });

    it('a run longer than the lease renews it before the publishes that need it: every follower sent, no claim lost', async () => {
      // 30 followers of 60 ms each: 1.8 s of publishing under a lease of 1 s (publishTimeout 300 ms).
      await start({ claimTimeoutMs: 1000, publishTimeout: 300 });
      await enqueue('a', 31);
      publisher.behaviour = () => new Promise((resolve) => setTimeout(resolve, 60));
      await poller.runOnce();
      assert.equal(published().length, 31);
      assert.ok((await rows()).every((row) => row.state === 'sent'));
      assert.deepEqual(logged('error'), []);
    });

    it('shutdown ends a run after the publish under way: what was published is marked sent, the rest stays pending', async () => {
      const second = gate();
      // Enqueued before the loop starts, so its first claim takes the key's head with its followers.
      await start({ maxFollowers: 0 });
      await enqueue('a', 6);
      await start({ shutdownTimeoutMs: 5000 }, { loop: true });
      publisher.behaviour = (message) => ((message.payload as { seq: number }).seq === 1 ? second.promise : undefined);
      await publisher.waitForCalls(2);
      const closing = (t as TestApp).app.close();
      // The shutdown is under way (the loop stopped) before the follower's publish ends.
      await new Promise((resolve) => setTimeout(resolve, 50));
      second.open();
      await closing;
      t = undefined;
      assert.deepEqual(published(), ['a:0', 'a:1']);
      assert.deepEqual(
        (await rows()).map((row) => row.state),
        ['sent', 'sent', 'pending', 'pending', 'pending', 'pending'],
      );
    });

    it("no follower is marked sent when the head's claim was lost meanwhile (another token)", async () => {
      await enqueue('a', 3);
      publisher.behaviour = async (message) => {
        // While the last follower publishes, the head's row passes to another owner.
        if ((message.payload as { seq: number }).seq === 2)
          await db.query("UPDATE queuebox_outbox SET claim_token = gen_random_uuid() WHERE state = 'processing'");
      };
      await poller.runOnce();
      assert.deepEqual(published(), ['a:0', 'a:1', 'a:2']);
      assert.deepEqual(
        (await rows()).map((row) => row.state),
        ['processing', 'pending', 'pending'],
      );
      assert.ok(logged('error').some((line) => line.includes('Lost the claim') && line.includes('before marking it sent')));
    });

    it("with sentRows: 'delete', the head and its followers are deleted together", async () => {
      await start({}, { sentRows: 'delete' });
      await enqueue('a', 4);
      await enqueue('b', 1);
      await poller.runOnce();
      assert.equal(published().length, 5);
      assert.deepEqual(await rows(), []);
    });

    it("the completion finishes only pending rows of the head's key after it, and nothing behind a head whose fence failed", async () => {
      const dialect = (t as TestApp).get(QUEUEBOX_DIALECT as never) as Dialect;
      await enqueue('a', 3);
      await enqueue('b', 3);
      const id = async (key: string, seq: number) =>
        (
          await db.query<{ id: string }>('SELECT id::text AS id FROM queuebox_outbox WHERE "key" = $1 AND (payload->>\'seq\')::int = $2', [
            key,
            seq,
          ])
        )[0].id;
      // a:0 is dead while the claim runs (a:1 is the head), then pending again (an operator's replay).
      await db.query("UPDATE queuebox_outbox SET state = 'dead' WHERE id = $1", [await id('a', 0)]);
      const heads = await dialect.outboxClaimBatch({ limit: 10, leaseMs: 5000 });
      await db.query("UPDATE queuebox_outbox SET state = 'pending' WHERE id = $1", [await id('a', 0)]);
      const head = heads.find((claim) => claim.message.key === 'a') as (typeof heads)[number];
      const lostHead = {
        id: (heads.find((claim) => claim.message.key === 'b') as (typeof heads)[number]).id,
        token: '00000000-0000-4000-8000-000000000000',
      };
      const done = await dialect.outboxCompleteWithFollowers({
        heads: [head, lostHead],
        followers: [
          { id: await id('a', 2), headId: head.id },
          // Another key; before the head; behind a head whose fence fails.
          { id: await id('b', 1), headId: head.id },
          { id: await id('a', 0), headId: head.id },
          { id: await id('b', 2), headId: lostHead.id },
        ],
      });
      assert.deepEqual([...done.heads], [head.id]);
      assert.deepEqual([...done.followers], [await id('a', 2)]);
    });

    it('the read gives a head no followers once an earlier row of its key committed after its claim (I4)', async () => {
      const dialect = (t as TestApp).get(QUEUEBOX_DIALECT as never) as Dialect;
      // `early` takes its id first and commits last.
      const early = new Client({ connectionString: db.url });
      await early.connect();
      try {
        await early.query('BEGIN');
        await early.query(
          "INSERT INTO queuebox_outbox (message_id, destination, \"key\", payload) VALUES (gen_random_uuid(), 'billing', 'a', '{\"seq\": 0}')",
        );
        await enqueue('a', 2, 'billing', 1);
        const [head] = await dialect.outboxClaimBatch({ limit: 10, leaseMs: 5000 });
        assert.equal((head.message.payload as { seq: number }).seq, 1, 'the claim sees no earlier row yet');
        const heads = [{ id: head.id, key: 'a' }];
        assert.deepEqual(
          (await dialect.outboxFollowers({ heads, perHead: 10 })).map((row) => (row.message.payload as { seq: number }).seq),
          [2],
        );
        await early.query('COMMIT');
        assert.deepEqual(await dialect.outboxFollowers({ heads, perHead: 10 }), []);
      } finally {
        await early.end();
      }
    });
  },
);
