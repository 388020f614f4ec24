import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ClientsModule, Transport } from '@nestjs/microservices';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { ClientProxyPublisher } from '../../lib/publishers/client-proxy.publisher';
import { RecordingLogger } from './app';
import { eventually, type TestDatabase } from './database';

/** How the consumers of test/fixtures/rmq-consumer.ts are configured (see that file). */
export type ConsumerMode = 'recipe' | 'nest-defaults' | 'prefetch-one';

export interface ConsumerOrderResult {
  /** Messages enqueued (and published). */
  sent: number;
  /** Inbox rows stored. */
  stored: number;
  /** Message ids enqueued but never stored. */
  missing: string[];
  /** Per key, the sequence numbers in inbox id order, for the keys where they are not ascending. */
  outOfOrder: Record<string, number[]>;
  /** Messages stored after a later message of their key (0 when every key is in order). */
  misplaced: number;
  /** Rows stored by each replica (the `x-consumer` header of the row). */
  byConsumer: Record<string, number>;
  /** Redeliveries the inbox recognised as duplicates, as the surviving replicas printed them. */
  duplicates: number;
  /** Deliveries that failed on purpose (`failEvery`), as the replicas printed them. */
  failures: number;
  /** The replica killed with SIGKILL, and how many rows were stored when it was. */
  killed?: { name: string; atStored: number };
}

interface Consumer {
  name: string;
  child: ChildProcess;
  output: () => string;
  exited: Promise<unknown>;
}

async function startConsumer(name: string, env: Record<string, string>): Promise<Consumer> {
  const child = spawn(process.execPath, [join(__dirname, '..', 'fixtures', 'rmq-consumer.js')], {
    env: { ...process.env, ...env, QUEUEBOX_TEST_WORKER: name },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let output = '';
  const exited = new Promise((resolve) => child.once('exit', resolve));
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on('data', (chunk) => {
      output += String(chunk);
      if (output.includes('ready')) resolve();
    });
    void exited.then((code) => reject(new Error(`consumer ${name} exited (${String(code)}) before it was ready`)));
  });
  return { name, child, output: () => output, exited };
}

/**
 * Publishes `keys * perKey` messages through QueueBox's ClientProxyPublisher to a fresh RabbitMQ
 * queue consumed by `replicas` processes that store each one in the inbox of `db`, and reports the
 * order the inbox stored them in, per key. `backlog`: that many of the messages are published
 * before the replicas start (a backlog, as after a deploy), the rest while they consume.
 * `killActiveAfter`: SIGKILL the replica that is storing once that many rows are stored (the others
 * go on).
 */
export async function runConsumerOrder(p: {
  db: TestDatabase;
  amqpUrl: string;
  mode: ConsumerMode;
  replicas: number;
  keys: number;
  perKey: number;
  backlog?: number;
  killActiveAfter?: number;
  handlerDelayMs?: number;
  failEvery?: number;
  timeoutMs?: number;
}): Promise<ConsumerOrderResult> {
  const queue = `qb_order_${randomBytes(6).toString('hex')}`;
  const queueOptions = { durable: true, arguments: p.mode === 'recipe' ? { 'x-single-active-consumer': true } : {} };
  const env = {
    QUEUEBOX_TEST_DB_URL: p.db.url,
    QUEUEBOX_TEST_AMQP_URL: p.amqpUrl,
    QUEUEBOX_TEST_QUEUE: queue,
    QUEUEBOX_TEST_RMQ_MODE: p.mode,
    QUEUEBOX_TEST_HANDLER_DELAY_MS: String(p.handlerDelayMs ?? 0),
    QUEUEBOX_TEST_FAIL_EVERY: String(p.failEvery ?? 0),
  };
  const consumers: Consumer[] = [];
  let publisherApp: Awaited<ReturnType<typeof NestFactory.createApplicationContext>> | undefined;
  try {
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: p.db.url, logging: false }),
        ClientsModule.register({
          isGlobal: true,
          clients: [{ name: 'BILLING_RMQ', transport: Transport.RMQ, options: { urls: [p.amqpUrl], queue, queueOptions } }],
        }),
        QueueBoxModule.forRoot({
          workers: { outbox: true, relay: false, pull: false },
          outbox: { publishers: { billing: ClientProxyPublisher.for('BILLING_RMQ') }, pollIntervalMs: 20 },
        }),
      ],
    })
    class PublisherModule {}
    publisherApp = await NestFactory.createApplicationContext(PublisherModule, { logger: new RecordingLogger(), abortOnError: false });
    const dataSource = publisherApp.get<DataSource>(getDataSourceToken());
    const outbox = publisherApp.get(OutboxService);
    const messages = Array.from({ length: p.keys * p.perKey }, (_, i) => ({
      destination: 'billing',
      key: `customer-${i % p.keys}`,
      payload: { key: `customer-${i % p.keys}`, seq: Math.floor(i / p.keys) },
    }));
    const sent: string[] = [];
    const enqueue = async (from: number, to: number) => {
      for (let i = from; i < to; i += 50) {
        const batch = messages.slice(i, Math.min(i + 50, to));
        for (const r of await dataSource.transaction((manager) => outbox.enqueueMany(manager, batch))) sent.push(r.messageId);
      }
    };
    const backlog = p.backlog ?? 0;
    await enqueue(0, backlog);
    await eventually(
      async () => (await p.db.query(`SELECT 1 FROM queuebox_outbox WHERE state <> 'sent' LIMIT 1`)).length === 0,
      'the backlog published',
      60_000,
    );
    // One after the other: on a single active consumer queue the first is the active one.
    for (let i = 0; i < p.replicas; i++) consumers.push(await startConsumer(`replica-${i + 1}`, env));
    await enqueue(backlog, messages.length);

    const storedCount = async () =>
      (await p.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM queuebox_inbox WHERE source = 'billing'`))[0].n;
    let killed: ConsumerOrderResult['killed'];
    if (p.killActiveAfter !== undefined) {
      await eventually(async () => (await storedCount()) >= (p.killActiveAfter as number), `${p.killActiveAfter} rows stored`, 60_000, 5);
      const [{ consumer }] = await p.db.query<{ consumer: string }>(
        `SELECT headers->>'x-consumer' AS consumer FROM queuebox_inbox WHERE source = 'billing' ORDER BY id DESC LIMIT 1`,
      );
      const victim = consumers.find((c) => c.name === consumer) as Consumer;
      victim.child.kill('SIGKILL');
      await victim.exited;
      killed = { name: victim.name, atStored: await storedCount() };
    }
    await eventually(async () => (await storedCount()) >= sent.length, `${sent.length} rows stored`, p.timeoutMs ?? 60_000, 25).catch(
      () => undefined, // reported below as missing
    );

    const rows = await p.db.query<{ idempotency_key: string; aggregate_id: string; seq: number; consumer: string }>(
      `SELECT idempotency_key, aggregate_id, (payload->>'seq')::int AS seq, headers->>'x-consumer' AS consumer
         FROM queuebox_inbox WHERE source = 'billing' ORDER BY id`,
    );
    const stored = new Set(rows.map((r) => r.idempotency_key));
    const perKey = new Map<string, number[]>();
    const byConsumer: Record<string, number> = {};
    let misplaced = 0;
    for (const row of rows) {
      const seqs = perKey.get(row.aggregate_id) ?? [];
      if (seqs.some((seq) => seq > row.seq)) misplaced++;
      seqs.push(row.seq);
      perKey.set(row.aggregate_id, seqs);
      byConsumer[row.consumer] = (byConsumer[row.consumer] ?? 0) + 1;
    }
    const outOfOrder = Object.fromEntries([...perKey].filter(([, seqs]) => seqs.some((seq, i) => i > 0 && seq < seqs[i - 1])));
    const printed = (what: string) => consumers.reduce((n, c) => n + (c.output().match(new RegExp(`^${what} `, 'gm'))?.length ?? 0), 0);
    return {
      sent: sent.length,
      stored: rows.length,
      missing: sent.filter((id) => !stored.has(id)),
      outOfOrder,
      misplaced,
      byConsumer,
      duplicates: printed('duplicate'),
      failures: printed('failed'),
      killed,
    };
  } finally {
    await publisherApp?.close();
    for (const consumer of consumers) {
      if (consumer.child.exitCode === null && consumer.child.signalCode === null) {
        consumer.child.kill('SIGTERM');
        await consumer.exited;
      }
    }
    await deleteQueue(p.amqpUrl, queue);
  }
}

async function deleteQueue(url: string, queue: string): Promise<void> {
  const amqp = require('amqplib') as typeof import('amqplib');
  const connection = await amqp.connect(url);
  try {
    const channel = await connection.createChannel();
    await channel.deleteQueue(queue);
  } finally {
    await connection.close();
  }
}
