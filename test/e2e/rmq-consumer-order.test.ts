// docs/publishing.md's recipe for keeping per-key order on the receiving side of RabbitMQ, end to
// end with a real broker: QueueBox publishes through ClientProxyPublisher, two replicas of a Nest
// RabbitMQ microservice (test/fixtures/rmq-consumer.ts, each its own process) consume one queue and
// store each message with InboxService.receive(). The inbox must hold every message once, each key's
// messages in the order they were enqueued, although the active replica is killed mid-stream, some
// receives fail and are redelivered, a backlog waits when the replicas start, and each handler takes
// a random 0 to 20 ms (with which two replicas on a plain queue stored a hot key out of order).
// Without a broker at QUEUEBOX_TEST_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672) the test
// prints one line saying it is skipped and why.
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { runConsumerOrder } from '../support/rmq-order';

const RABBIT_URL = process.env.QUEUEBOX_TEST_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

/** `undefined` when a TCP connection to the broker opens, otherwise why not. */
function unreachable(url: string): Promise<string | undefined> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect({ host: hostname, port: Number(port || 5672), timeout: 1000 });
    socket.once('connect', () => {
      socket.destroy();
      resolve(undefined);
    });
    socket.once('timeout', () => {
      socket.destroy();
      resolve('timeout after 1000 ms');
    });
    socket.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
  });
}

describe('RabbitMQ consumers keep per-key order into the inbox (docs/publishing.md recipe)', { timeout: 180_000 }, () => {
  let db: TestDatabase | undefined;
  let skip: string | undefined;

  before(async () => {
    const reason = await unreachable(RABBIT_URL);
    if (reason) {
      skip = `RabbitMQ not reachable at ${RABBIT_URL.replace(/\/\/[^@/]*@/, '//')}: ${reason}`;
      console.log(`${skip}; the consumer order test is skipped.`);
      return;
    }
    db = await createTestDatabase();
  });
  after(async () => {
    await db?.drop();
  });

  it('two replicas, noAck false, prefetch 1, single active consumer, ack after receive: every message once, in order per key, across a kill -9', async (t) => {
    if (skip) return t.skip(skip);
    const keys = 3;
    const perKey = 100;
    const result = await runConsumerOrder({
      db: db as TestDatabase,
      amqpUrl: RABBIT_URL,
      mode: 'recipe',
      replicas: 2,
      keys,
      perKey,
      backlog: 100,
      killActiveAfter: 150,
      handlerDelayMs: 20,
      failEvery: 30,
    });
    console.log(
      `RabbitMQ consumer order: ${result.sent} messages of ${keys} keys, 2 replicas; stored ${result.stored}, ` +
        `by replica ${JSON.stringify(result.byConsumer)}; ${result.killed?.name} killed at ${result.killed?.atStored} stored; ` +
        `${result.failures} failed receives redelivered, ${result.duplicates} duplicate(s) recognised, ${result.misplaced} out of order`,
    );
    assert.equal(result.sent, keys * perKey);
    assert.deepEqual(result.missing, [], 'every published message is stored');
    assert.equal(result.stored, result.sent, 'each message stored once');
    assert.deepEqual(result.outOfOrder, {}, 'each key stored in enqueue order');
    assert.equal(result.misplaced, 0);
    assert.ok(result.killed, 'the active replica was killed');
    assert.equal(Object.keys(result.byConsumer).length, 2, 'the second replica took over after the kill');
    assert.ok(result.failures >= 9, `failed receives were redelivered (${result.failures})`);
  });
});
