import assert from 'node:assert/strict';
import { after, beforeEach, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { PermanentPublishError, PublishError } from '../../lib/errors/queuebox.errors';
import { QueueBoxEvents } from '../../lib/events/queuebox.events';
import { ABORT_GRACE_MS, OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import type { OutboxOptions } from '../../lib/types/options';
import type { OutboxMessageInput } from '../../lib/types/outbox';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { gate, RecordingBatchPublisher } from '../support/recording-publisher';

/**
 * `Publisher.publishBatch` (issue 36): the messages claimed together go to the publisher in calls
 * of up to `outbox.publishBatchSize`, at most `concurrency` calls at once, each message's result
 * recorded on its own row.
 */
describeWithDatabase('OutboxPoller: publishBatch (PostgreSQL)', { truncate: ['queuebox_outbox'] }, (db) => {
  let publisher: RecordingBatchPublisher;
  let t: TestApp | undefined;
  let outbox: OutboxService;
  let poller: OutboxPoller;
  let dataSource: DataSource;

  async function start(options: Partial<OutboxOptions> = {}, root: { loop?: boolean } = {}): Promise<void> {
    await t?.app.close();
    t = await createTestApp(db.url, {
      outbox: {
        publisher,
        pollIntervalMs: 20,
        claimTimeoutMs: 5000,
        retry: { attempts: 3, backoff: { delay: 10, jitter: false } },
        ...options,
      },
      workers: root.loop ? { outbox: true, relay: false, pull: false } : false,
    });
    outbox = t.get(OutboxService);
    poller = t.get(OutboxPoller);
    dataSource = t.app.get(getDataSourceToken());
  }

  beforeEach(async () => {
    publisher = new RecordingBatchPublisher();
    await start();
  });
  after(async () => {
    await t?.app.close();
  });

  /** Enqueues `count` messages (payload `{ seq }`; of `key` when given), in one transaction. */
  const enqueue = (count: number, key?: string) =>
    dataSource.transaction((manager) =>
      outbox.enqueueMany(
        manager,
        Array.from({ length: count }, (_, seq): OutboxMessageInput => ({ destination: 'billing', key, payload: { seq } })),
      ),
    );
  const seqOf = (message: { payload: unknown }) => (message.payload as { seq: number }).seq;
  const rows = () =>
    db.query<{ seq: number; state: string; attempts: number; last_error: string | null }>(
      "SELECT (payload->>'seq')::int AS seq, state, attempts, last_error FROM queuebox_outbox ORDER BY id",
    );

  it('hands the messages claimed together to publishBatch, each call filled up to publishBatchSize before the next, and marks each sent', async () => {
    await start({ concurrency: 3, batchSize: 40, publishBatchSize: 15 });
    await enqueue(40);
    const published: string[] = [];
    t?.get(QueueBoxEvents).on('queuebox:published', (event) => published.push(event.messageId));
    assert.equal(await poller.runOnce(), 40);
    // 40 claims, 3 free slots: calls of 15, 15 and 10 (not 14, 13 and 13: each call is a round trip).
    assert.deepEqual(
      publisher.batches.map((batch) => batch.length),
      [15, 15, 10],
    );
    assert.equal(publisher.mostInFlight, 3, 'the three calls ran at once');
    assert.deepEqual(
      publisher.batches.flat().map(seqOf),
      Array.from({ length: 40 }, (_, seq) => seq),
    );
    assert.equal(publisher.calls.length, 0, 'publish itself is not called');
    assert.ok((await rows()).every((row) => row.state === 'sent' && row.attempts === 1));
    assert.equal(published.length, 40, 'one published event per message');
  });

  it('fails only the messages a result rejects: retried with backoff (or at its Retry-After), or dead at once for a PermanentPublishError', async () => {
    publisher.batchBehaviour = (messages) =>
      messages.map((message) => {
        if (seqOf(message) === 1) return { status: 'rejected', reason: new Error('broker said no to 1') };
        if (seqOf(message) === 3) return { status: 'rejected', reason: new PermanentPublishError('3 can never go') };
        if (seqOf(message) === 4) return { status: 'rejected', reason: new PublishError('throttled', 429, { retryAfterMs: 60_000 }) };
        return { status: 'fulfilled', value: undefined };
      });
    await enqueue(6);
    assert.equal(await poller.runOnce(), 6);
    assert.equal(publisher.batches.length, 1);
    const after = await rows();
    assert.deepEqual(
      after.map((row) => row.state),
      ['sent', 'pending', 'sent', 'dead', 'pending', 'sent'],
    );
    assert.match(after[1].last_error ?? '', /broker said no to 1/);
    assert.match(after[3].last_error ?? '', /3 can never go/);
    assert.equal(after[1].attempts, 1);
    const [waits] = await db.query<{ backoff: number; retry_after: number }>(
      `SELECT max(extract(epoch FROM available_at - now()) * 1000) FILTER (WHERE payload->>'seq' = '1') AS backoff,
              max(extract(epoch FROM available_at - now()) * 1000) FILTER (WHERE payload->>'seq' = '4') AS retry_after
         FROM queuebox_outbox`,
    );
    assert.ok(waits.backoff < 1000, `1 waits its backoff (${waits.backoff} ms)`);
    assert.ok(waits.retry_after > 55_000, `4 waits its Retry-After (${waits.retry_after} ms)`);
  });

  it('a call that throws fails every message of it; a result of the wrong shape fails them all with an error that says what it was', async () => {
    publisher.batchBehaviour = () => {
      throw new Error('connection reset');
    };
    await enqueue(3);
    await poller.runOnce();
    assert.ok(
      (await rows()).every((row) => row.state === 'pending' && row.attempts === 1 && /connection reset/.test(row.last_error ?? '')),
      JSON.stringify(await rows()),
    );
    await db.query("UPDATE queuebox_outbox SET available_at = now() - interval '1 second'");
    publisher.batchBehaviour = () => [{ status: 'fulfilled', value: undefined }];
    await poller.runOnce();
    const after = await rows();
    assert.ok(
      after.every((row) => row.state === 'pending' && row.attempts === 2),
      JSON.stringify(after),
    );
    assert.match(
      after[0].last_error ?? '',
      /"publishBatch" resolved to an array of 1 item\(s\), not nothing or one settled result .* for each of its 3 message\(s\)/,
    );
  });

  it('publishTimeout bounds the whole call: its signal aborts and each message of it is retried; a call that ignores it keeps its slot and is named with its messages', async () => {
    const stuck = gate();
    let aborted: unknown;
    publisher.batchBehaviour = async (_messages, signal) => {
      signal.addEventListener('abort', () => {
        aborted = signal.reason;
      });
      await stuck.promise; // never honours its signal
      return undefined;
    };
    await start({ concurrency: 1, batchSize: 6, publishBatchSize: 3, publishTimeout: 50 }, { loop: true });
    await enqueue(6);
    await eventually(
      async () => (await rows()).filter((row) => /publishTimeout/.test(row.last_error ?? '')).length === 3,
      'the first call to time out',
    );
    assert.match(String(aborted), /publishTimeout/);
    assert.equal(publisher.batches.length, 1, 'its slot stays taken: the second call does not start');
    assert.equal(poller.overrunningCount, 1);
    await eventually(
      async () =>
        (t?.logger.lines ?? []).some(
          (line) =>
            line.level === 'warn' &&
            line.message.includes(`(and 2 more of its "publishBatch" call) was aborted by its timeout ("outbox.publishTimeout", 50 ms)`),
        ),
      'the warning that names the call still running',
    );
    // Every call slot kept: the messages waiting for a call go back, the attempt not counted.
    await eventually(
      async () => (await rows()).filter((row) => row.state === 'pending' && row.attempts === 0).length === 3,
      'the three that waited for a call to be handed back',
    );
    stuck.open();
    await eventually(async () => (await rows()).every((row) => row.state === 'sent'), 'every message sent once the call ended');
    assert.equal(publisher.mostInFlight, 1);
  });

  it('a call that honours its timed-out signal keeps its results: what it delivered before the abort is sent, not retried, and only the rest goes again', async () => {
    const delivered: number[] = [];
    publisher.batchBehaviour = async (messages, signal) => {
      // A broker's call that sends one message at a time and stops at the abort, reporting each.
      const results: PromiseSettledResult<unknown>[] = [];
      for (const message of messages) {
        if (signal.aborted) {
          results.push({ status: 'rejected', reason: signal.reason });
          continue;
        }
        await new Promise((resolve) => setTimeout(resolve, 30));
        delivered.push(seqOf(message));
        results.push({ status: 'fulfilled', value: undefined });
      }
      return results;
    };
    await start({ concurrency: 1, batchSize: 6, publishBatchSize: 6, publishTimeout: 100 });
    await enqueue(6);
    assert.equal(await poller.runOnce(), 6);
    const after = await rows();
    const sent = after.filter((row) => row.state === 'sent').map((row) => row.seq);
    assert.ok(sent.length >= 2 && sent.length < 6, `the call delivered some before its timeout: ${JSON.stringify(after)}`);
    assert.deepEqual(sent, delivered, 'exactly the messages it delivered are sent');
    for (const row of after.filter((row) => row.state !== 'sent')) {
      assert.equal(row.state, 'pending');
      assert.equal(row.attempts, 1);
      assert.match(row.last_error ?? '', /took longer than "outbox.publishTimeout" \(100 ms\)/, 'the timeout is named, not an AbortError');
    }
    await db.query("UPDATE queuebox_outbox SET available_at = now() - interval '1 second' WHERE state = 'pending'");
    publisher.batchBehaviour = () => undefined;
    await poller.runOnce();
    assert.ok((await rows()).every((row) => row.state === 'sent'));
    const deliveries = [...delivered, ...publisher.batches.slice(1).flat().map(seqOf)].sort((a, b) => a - b);
    assert.deepEqual(deliveries, [0, 1, 2, 3, 4, 5], 'each message delivered once');
    assert.equal(poller.overrunningCount, 0);
    assert.ok(!JSON.stringify(t?.logger.lines).includes('ignores its signal'), 'a call that honours its signal is not said to ignore it');
  });

  it('after its timeout a call is waited for only ABORT_GRACE_MS: a later answer is not taken, and a rejection after the abort that is its own stays its own', async () => {
    const late = gate();
    publisher.batchBehaviour = async (messages, signal) => {
      await new Promise((resolve) => signal.addEventListener('abort', resolve));
      if (seqOf(messages[0]) === 0) {
        await late.promise; // answers long after the grace: its word comes too late
        return undefined;
      }
      return messages.map(() => ({ status: 'rejected', reason: new PermanentPublishError('refused while aborting') }));
    };
    await start({ concurrency: 2, batchSize: 4, publishBatchSize: 2, publishTimeout: 50 });
    await enqueue(4);
    const startedAt = performance.now();
    assert.equal(await poller.runOnce(), 4);
    const tookMs = performance.now() - startedAt;
    assert.ok(tookMs >= 50 + ABORT_GRACE_MS - 20, `the ignoring call was waited for its grace (${tookMs} ms)`);
    const after = await rows();
    assert.deepEqual(
      after.map((row) => row.state),
      ['pending', 'pending', 'dead', 'dead'],
    );
    assert.match(after[0].last_error ?? '', /publishTimeout/);
    assert.match(after[2].last_error ?? '', /refused while aborting/);
    assert.equal(poller.overrunningCount, 1);
    assert.ok(
      (t?.logger.lines ?? []).some((line) => line.level === 'warn' && line.message.includes('ignores its signal')),
      'the call still running after its grace is named at once',
    );
    late.open();
    await eventually(async () => poller.overrunningCount === 0, 'the late call to end');
    assert.equal((await rows())[0].state, 'pending', 'its late answer changed nothing');
  });

  it("a keyed message with followers is published by publish, then its followers in order; a claim's other messages go in a batch", async () => {
    await enqueue(3, 'k');
    await dataSource.transaction((manager) =>
      outbox.enqueueMany(
        manager,
        [10, 11].map((seq) => ({ destination: 'billing', payload: { seq } })),
      ),
    );
    assert.equal(await poller.runOnce(), 3, 'the head of k and the two without a key');
    assert.deepEqual(
      publisher.calls.map(({ message }) => seqOf(message)),
      [0, 1, 2],
      'the head and its followers, one at a time in key order',
    );
    assert.deepEqual(
      publisher.batches.map((batch) => batch.map(seqOf)),
      [[10, 11]],
    );
    assert.ok((await rows()).every((row) => row.state === 'sent'));
  });

  it('with keepsBatchOrder, a head and its followers go out in publishBatch calls of up to publishBatchSize, in key order, the head leading the first', async () => {
    publisher.keepsBatchOrder = true;
    await start({ publishBatchSize: 3 });
    await enqueue(7, 'k');
    assert.equal(await poller.runOnce(), 1, 'one claim: the head');
    assert.equal(publisher.calls.length, 0, 'publish itself is not called: the head is in the first call');
    assert.deepEqual(
      publisher.batches.map((batch) => batch.map(seqOf)),
      [[0, 1, 2], [3, 4, 5], [6]],
    );
    assert.ok((await rows()).every((row) => row.state === 'sent' && row.attempts === 1));
  });

  it('with keepsBatchOrder, a head that fails in its call is retried with its attempt counted, and its followers stay pending uncharged whatever the call said of them', async () => {
    publisher.keepsBatchOrder = true;
    // Breaks its own promise: reports 1 published after the head failed.
    publisher.batchBehaviour = (messages) =>
      messages.map((message) =>
        seqOf(message) === 0 ? { status: 'rejected', reason: new Error('head refused') } : { status: 'fulfilled', value: undefined },
      );
    await enqueue(3, 'k');
    await poller.runOnce();
    assert.deepEqual(
      publisher.batches.map((batch) => batch.map(seqOf)),
      [[0, 1, 2]],
    );
    const after = await rows();
    assert.deepEqual(
      after.map(({ state, attempts }) => `${state}/${attempts}`),
      ['pending/1', 'pending/0', 'pending/0'],
    );
    assert.match(after[0].last_error ?? '', /head refused/);
    const [head, first] = await db.query<{ message_id: string }>('SELECT message_id::text FROM queuebox_outbox ORDER BY id');
    assert.ok(
      t?.logger.has('error', `"publishBatch" reported outbox message ${first.message_id} published although ${head.message_id}`),
      JSON.stringify(t?.logger.lines),
    );
  });

  it('an ordered call that fails at a follower: those before it are sent, it and those after stay pending uncharged; one reported published after it is not counted, and logged', async () => {
    publisher.keepsBatchOrder = true;
    // Breaks its own promise: reports 4 and 5 published after 3 failed.
    publisher.batchBehaviour = (messages) =>
      messages.map((message) =>
        seqOf(message) === 3 ? { status: 'rejected', reason: new Error('3 refused') } : { status: 'fulfilled', value: undefined },
      );
    await enqueue(6, 'k');
    await poller.runOnce();
    assert.deepEqual(
      publisher.batches.map((batch) => batch.map(seqOf)),
      [[0, 1, 2, 3, 4, 5]],
    );
    assert.deepEqual(
      (await rows()).map(({ state, attempts }) => `${state}/${attempts}`),
      ['sent/1', 'sent/1', 'sent/1', 'pending/0', 'pending/0', 'pending/0'],
    );
    const [third, fourth] = await db.query<{ message_id: string }>(
      "SELECT message_id::text FROM queuebox_outbox WHERE payload->>'seq' IN ('3', '4') ORDER BY id",
    );
    assert.ok(t?.logger.has('warn', `Publishing outbox message ${third.message_id} after`), JSON.stringify(t?.logger.lines));
    assert.ok(
      t?.logger.has('error', `"publishBatch" reported outbox message ${fourth.message_id} published although ${third.message_id}`),
      JSON.stringify(t?.logger.lines),
    );
  });

  it("a call of a head and its followers is aborted when the head's claim is lost during it; the followers stay pending", async () => {
    publisher.keepsBatchOrder = true;
    let abortedWith: unknown;
    publisher.batchBehaviour = (_messages, signal) =>
      new Promise((_resolve, reject) =>
        signal.addEventListener('abort', () => {
          abortedWith = signal.reason;
          reject(signal.reason);
        }),
      );
    // Renewals every second; the call's own timeout (2.9 s) would come later.
    await start({ claimTimeoutMs: 3000, publishTimeout: 2900 });
    await enqueue(3, 'k');
    const running = poller.runOnce();
    await publisher.waitForBatches(1);
    // As if the lease had ended and another replica claimed the head: its next renewal fails.
    await db.query("UPDATE queuebox_outbox SET claim_token = gen_random_uuid() WHERE payload->>'seq' = '0'");
    await running;
    assert.match(String(abortedWith), /claim.*lost|lost.*claim/i);
    assert.deepEqual(
      (await rows()).map(({ state, attempts }) => `${state}/${attempts}`),
      ['processing/1', 'pending/0', 'pending/0'],
    );
  });

  it("a message whose claim was taken over during the call is not marked sent by this claim; the call's other messages are", async () => {
    const held = gate();
    publisher.batchBehaviour = () => held.promise.then(() => undefined);
    await enqueue(3);
    const running = poller.runOnce();
    await publisher.waitForBatches(1);
    // As if its lease had ended and another replica claimed it: a new token.
    await db.query("UPDATE queuebox_outbox SET claim_token = gen_random_uuid() WHERE payload->>'seq' = '1'");
    held.open();
    await running;
    assert.deepEqual(
      (await rows()).map((row) => row.state),
      ['sent', 'processing', 'sent'],
    );
    assert.ok(t?.logger.has('error', 'Lost the claim on message'), JSON.stringify(t?.logger.lines));
  });

  it('shutdown: a call running past shutdownTimeoutMs has its signal aborted and its rows released, no attempt charged; one that ignores it names every message as a possible duplicate', async () => {
    const late = gate();
    let aborted: unknown;
    publisher.batchBehaviour = (_messages, signal) => {
      signal.addEventListener('abort', () => {
        aborted = signal.reason;
      });
      return late.promise.then(() => undefined); // never honours its signal
    };
    await start({ shutdownTimeoutMs: 300 }, { loop: true });
    const [first, second] = await enqueue(2);
    await publisher.waitForBatches(1);
    const { logger } = t as TestApp;
    await t?.app.close();
    t = undefined;
    assert.match(String(aborted), /not running|shut/i, 'the shutdown aborted the call');
    assert.deepEqual(
      (await rows()).map(({ state, attempts }) => ({ state, attempts })),
      [
        { state: 'pending', attempts: 0 },
        { state: 'pending', attempts: 0 },
      ],
      'released at deregistration, the attempt not charged',
    );
    const lines = JSON.stringify(logger.lines);
    assert.ok(
      logger.has('warn', `The publish of message ${first.messageId} (and 1 more of its "publishBatch" call) was aborted by the shutdown`),
      lines,
    );
    assert.ok(logger.has('warn', `The publish of message(s) ${first.messageId}, ${second.messageId} ignored its abort signal`), lines);
    late.open();
    await eventually(async () => publisher.delivered.length === 2, 'the ignoring call to deliver after all');
  });
});
