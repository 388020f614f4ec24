import 'reflect-metadata';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { connect as tcpConnect } from 'node:net';
import { afterEach, before, it, type TestContext } from 'node:test';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ClientProxyFactory, ClientsModule, Transport } from '@nestjs/microservices';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { ClientProxyPublisher } from '../../lib/publishers/client-proxy.publisher';
import type { OutboxOptions } from '../../lib/types/options';
import type { OutboxMessageInput } from '../../lib/types/outbox';
import { RecordingLogger } from '../support/app';
import { describeWithDatabase } from '../support/database';

const RABBIT_URL = process.env.QUEUEBOX_TEST_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const NATS_URL = process.env.QUEUEBOX_TEST_NATS_URL ?? 'nats://127.0.0.1:4222';
// Nothing listens on port 1: a broker that is down.
const CLOSED_AMQP = 'amqp://guest:guest@127.0.0.1:1';
const CLOSED_NATS = 'nats://127.0.0.1:1';

/** Resolves `undefined` when a TCP connection to the URL's host and port opens, or the reason it did not. */
function unreachable(url: string): Promise<string | undefined> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = tcpConnect({ host: hostname, port: Number(port), timeout: 1000 });
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

const redact = (url: string) => url.replace(/\/\/[^@/]*@/, '//');

describeWithDatabase('ClientProxyPublisher through real brokers', { timeout: 60_000 }, (db) => {
  let app: Awaited<ReturnType<typeof NestFactory.createApplicationContext>> | undefined;
  const skip: { rabbit?: string; nats?: string } = {};

  before(async () => {
    const rabbit = await unreachable(RABBIT_URL);
    if (rabbit) {
      skip.rabbit = `RabbitMQ not reachable at ${redact(RABBIT_URL)}: ${rabbit}`;
      console.log(`${skip.rabbit}; its delivery test is skipped.`);
    }
    const nats = await unreachable(NATS_URL);
    if (nats) {
      skip.nats = `NATS not reachable at ${NATS_URL}: ${nats}`;
      console.log(`${skip.nats}; its delivery test is skipped.`);
    }
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await db.query('TRUNCATE queuebox_outbox');
  });

  function skipped(t: TestContext, broker: 'rabbit' | 'nats'): boolean {
    const reason = skip[broker];
    if (reason) t.skip(reason);
    return reason !== undefined;
  }

  /** An app with a ClientsModule client (global, as an app that uses it elsewhere too would register it) and QueueBox. */
  async function start(clients: Parameters<typeof ClientsModule.register>[0], outbox: OutboxOptions) {
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, logging: false }),
        ClientsModule.register(clients),
        QueueBoxModule.forRoot({ workers: { outbox: true, relay: false, pull: false }, outbox }),
      ],
    })
    class AppModule {}
    app = await NestFactory.createApplicationContext(AppModule, { logger: new RecordingLogger(), abortOnError: false });
    const poller = app.get(OutboxPoller);
    await poller.stop(); // driven by hand below
    const dataSource = app.get<DataSource>(getDataSourceToken());
    const service = app.get(OutboxService);
    return {
      enqueue: (messages: OutboxMessageInput[]) => dataSource.transaction((manager) => service.enqueueMany(manager, messages)),
      drain: async () => {
        while ((await poller.runOnce()) > 0);
      },
    };
  }

  const rows = () =>
    db.query<{ state: string; attempts: number; last_error: string | null }>(
      'SELECT state, attempts, last_error FROM queuebox_outbox ORDER BY id',
    );

  it('RabbitMQ: delivers to a real queue with publisher confirms, the message id and the headers', async (t) => {
    if (skipped(t, 'rabbit')) return;
    const amqp = require('amqplib') as typeof import('amqplib');
    const queue = `qb_test_${randomBytes(6).toString('hex')}`;
    const { enqueue, drain } = await start(
      {
        isGlobal: true,
        clients: [
          { name: 'BILLING_RMQ', transport: Transport.RMQ, options: { urls: [RABBIT_URL], queue, queueOptions: { durable: true } } },
        ],
      },
      { publishers: { billing: ClientProxyPublisher.for('BILLING_RMQ') }, retry: false },
    );
    const [sent] = await enqueue([
      { destination: 'billing', key: 'customer-7', payload: { invoice: 42 }, headers: { 'x-tenant': 'acme' } },
    ]);
    await drain();
    assert.deepEqual(await rows(), [{ state: 'sent', attempts: 1, last_error: null }]);

    const connection = await amqp.connect(RABBIT_URL);
    const channel = await connection.createChannel();
    try {
      const got = await channel.get(queue, { noAck: true });
      assert.ok(got, 'the message is in the queue');
      assert.deepEqual(JSON.parse(got.content.toString()), { pattern: 'billing', data: { invoice: 42 } });
      assert.equal(got.properties.messageId, sent.messageId);
      assert.equal(got.properties.headers?.['X-Message-Id'], sent.messageId);
      assert.equal(got.properties.headers?.['x-tenant'], 'acme');
      assert.equal(got.properties.headers?.['X-QueueBox-Key'], 'customer-7');
      assert.equal(got.properties.deliveryMode, 2, 'persistent');
    } finally {
      await channel.deleteQueue(queue); // the broker is shared: leave no queue behind, failed or not
      await connection.close();
    }
  });

  it('RabbitMQ: a publish the broker refuses (nack) is retried, which proves publisher confirms are used', async (t) => {
    if (skipped(t, 'rabbit')) return;
    const amqp = require('amqplib') as typeof import('amqplib');
    // A queue that holds nothing and refuses new messages: the broker nacks every publish to it.
    const queue = `qb_test_full_${randomBytes(6).toString('hex')}`;
    const queueOptions = { durable: false, arguments: { 'x-max-length': 0, 'x-overflow': 'reject-publish' } };
    try {
      const { enqueue, drain } = await start(
        { isGlobal: true, clients: [{ name: 'FULL_RMQ', transport: Transport.RMQ, options: { urls: [RABBIT_URL], queue, queueOptions } }] },
        { publishers: { billing: ClientProxyPublisher.for('FULL_RMQ') }, claimTimeoutMs: 6000, publishTimeout: '3s', retry: 5 },
      );
      await enqueue([{ destination: 'billing', payload: 1 }]);
      await drain();
      const [row] = await rows();
      assert.equal(row.state, 'pending', 'not marked sent: the broker did not take it');
      assert.equal(row.attempts, 1);
      assert.match(row.last_error ?? '', /rmq emit to "billing" failed: .*nack/i);
    } finally {
      const connection = await amqp.connect(RABBIT_URL);
      await (await connection.createChannel()).deleteQueue(queue);
      await connection.close();
    }
  });

  // The "down" tests need only the client packages, not a running broker.
  it('RabbitMQ down: the message is retried (attempt counted, last_error set), not lost', async () => {
    const { enqueue, drain } = await start(
      { isGlobal: true, clients: [{ name: 'DOWN_RMQ', transport: Transport.RMQ, options: { urls: [CLOSED_AMQP], queue: 'qb_never' } }] },
      { publishers: { billing: ClientProxyPublisher.for('DOWN_RMQ') }, claimTimeoutMs: 6000, publishTimeout: '1s', retry: 5 },
    );
    await enqueue([{ destination: 'billing', payload: 1 }]);
    await drain();
    const [row] = await rows();
    assert.equal(row.state, 'pending');
    assert.equal(row.attempts, 1);
    assert.ok(row.last_error, 'last_error is set');
    assert.match(
      row.last_error,
      /PublishError \[QUEUEBOX_PUBLISH\]: rmq emit to "billing" failed: Error: connect ECONNREFUSED 127\.0\.0\.1:1/,
    );
    assert.ok(!row.last_error.includes('guest'), 'the broker URL (credentials) is not stored');
  });

  it('NATS: delivers to a real subject with the message id and the headers', async (t) => {
    if (skipped(t, 'nats')) return;
    const nats = require('@nats-io/transport-node') as typeof import('@nats-io/transport-node');
    const subject = `billing.${randomBytes(6).toString('hex')}`;
    const raw = await nats.connect({ servers: NATS_URL });
    const client = ClientProxyFactory.create({ transport: Transport.NATS, options: { servers: [NATS_URL] } });
    try {
      const subscription = raw.subscribe(subject, { max: 1 });
      await raw.flush();
      const received = (async () => {
        for await (const message of subscription) return message;
      })();
      const { enqueue, drain } = await start({ clients: [] }, { publisher: new ClientProxyPublisher(client), retry: false });
      const [sent] = await enqueue([{ destination: subject, payload: { invoice: 43 }, headers: { 'x-tenant': 'acme' } }]);
      await drain();
      assert.deepEqual(await rows(), [{ state: 'sent', attempts: 1, last_error: null }]);
      const message = await received;
      assert.ok(message);
      assert.deepEqual(JSON.parse(new TextDecoder().decode(message.data)), { pattern: subject, data: { invoice: 43 } });
      assert.equal(message.headers?.get('X-Message-Id'), sent.messageId);
      assert.equal(message.headers?.get('x-tenant'), 'acme');
    } finally {
      await client.close();
      await raw.close();
    }
  });

  it('NATS down: the message is retried with the connection error, not lost', async () => {
    const client = ClientProxyFactory.create({ transport: Transport.NATS, options: { servers: [CLOSED_NATS], reconnect: false } });
    try {
      const { enqueue, drain } = await start(
        { clients: [] },
        { publisher: new ClientProxyPublisher(client), claimTimeoutMs: 6000, publishTimeout: '2s', retry: 5 },
      );
      await enqueue([{ destination: 'billing', payload: 1 }]);
      await drain();
      const [row] = await rows();
      assert.equal(row.state, 'pending');
      assert.equal(row.attempts, 1);
      assert.ok(row.last_error, 'last_error is set');
      assert.match(row.last_error, /PublishError \[QUEUEBOX_PUBLISH\]: nats emit to "billing" failed: ConnectionError: connection refused/);
    } finally {
      await client.close().catch(() => undefined);
    }
  });
});
