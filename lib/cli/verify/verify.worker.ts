// A worker process of `queuebox verify`: a Nest application as a user's would be, with TypeORM and
// QueueBoxModule on the run's tables, running the outbox poller, the inbox relay (with followers),
// a pull handler and a batch pull handler (with followers). Started by the run (`fork`), never by
// hand: its configuration comes in QUEUEBOX_VERIFY_WORKER, and what it publishes goes to the run
// over the IPC channel, which answers as a destination would (accepted or refused). Pull handlers
// and the relay write to the outbox in their transaction, so every message ends at the run.
// QUEUEBOX_VERIFY_DEFECT puts a defect into this process's Dialect (verify's self-test).
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import type { EntityManager } from 'typeorm';
import { sleepUntil } from '../../common/wait';
import { dialectDriver } from '../../dialects/drivers';
import { QueueBoxModule } from '../../module/queuebox.module';
import { OutboxService } from '../../outbox/outbox.service';
import { type PullBatchContext, type PullContext, PullHandler } from '../../pull/pull-handler.decorator';
import type { InboxMessage, OutboundMessage } from '../../types/messages';
import type { Publisher } from '../../types/outbox';
import { parseDatabaseUrl } from '../database-url';
import { injectDefect, isDialect } from './verify.defects';
import { verifyMessages } from './verify.messages';
import { defectOf, PATH_NAMES, VERIFY_POLL_INTERVAL_MS, type VerifyPath } from './verify.options';
import {
  VERIFY_WORKER_ENV,
  type VerifyAck,
  type VerifyDeliveryMessage,
  type VerifyPayload,
  type VerifyWorkerConfig,
} from './verify.protocol';

const raw = process.env[VERIFY_WORKER_ENV];
if (!raw || !process.send) {
  process.stderr.write(`${verifyMessages.workerConfigMissing(VERIFY_WORKER_ENV)}\n`);
  process.exit(2);
}
const config = JSON.parse(raw) as VerifyWorkerConfig;
const defect = defectOf(process.env);
/** Sends `message` to the run; `failed` when the channel is gone (the run ended). */
function send(message: VerifyDeliveryMessage | { type: 'ready' }, failed: (error: Error) => void = () => undefined): void {
  if (!process.connected || !process.send) {
    failed(new Error(verifyMessages.destinationGone()));
    return;
  }
  process.send(message, undefined, undefined, (error) => {
    if (error) failed(error);
  });
}

// The run decides when this process stops: Ctrl-C in its terminal reaches it too, and the run kills
// or stops its workers itself; without the run (its channel closed) there is nothing to work for.
process.on('SIGINT', () => undefined);
process.on('disconnect', () => process.exit(1));

const retry = { attempts: config.maxAttempts, backoff: { delay: 50, factor: 2, maxDelay: 250, jitter: false } };
const payloadOf = (message: { payload: unknown }) => message.payload as VerifyPayload;

/** What every inbox stage does with a message before its real work: poison fails, a flaky one fails its first attempt. */
function misbehave(message: InboxMessage): void {
  const payload = payloadOf(message);
  if (payload.poison) throw new Error(verifyMessages.poisonRefused(payload.name));
  if (payload.flaky && message.attempt === 1) throw new Error(verifyMessages.destinationRefused(payload.name));
}

/** The publisher: sends each message to the run, which records it and answers as a destination (after `slowMs` for a slow one). */
class DestinationPublisher implements Publisher {
  private sent = 0;
  private readonly waiting = new Map<number, (ok: boolean) => void>();

  constructor() {
    process.on('message', (message: VerifyAck) => {
      if (message?.type !== 'ack') return;
      this.waiting.get(message.n)?.(message.ok);
    });
  }

  publish(message: OutboundMessage, signal: AbortSignal): Promise<void> {
    const payload = payloadOf(message);
    if (payload.poison) return Promise.reject(new Error(verifyMessages.poisonRefused(payload.name)));
    signal.throwIfAborted();
    const n = ++this.sent;
    return new Promise<void>((resolve, reject) => {
      const abort = () => {
        this.waiting.delete(n);
        reject(signal.reason);
      };
      this.waiting.set(n, (ok) => {
        this.waiting.delete(n);
        signal.removeEventListener('abort', abort);
        if (ok) resolve();
        else reject(new Error(verifyMessages.destinationRefused(payload.name)));
      });
      signal.addEventListener('abort', abort, { once: true });
      send(
        {
          type: 'delivery',
          n,
          messageId: message.messageId,
          destination: message.destination,
          key: message.key,
          attempt: message.attempt,
          payload,
          sentAt: Date.now(),
        },
        (error) => {
          this.waiting.delete(n);
          signal.removeEventListener('abort', abort);
          reject(error);
        },
      );
    });
  }
}

@Injectable()
class VerifyConsumers {
  constructor(private readonly outbox: OutboxService) {}

  @PullHandler(PATH_NAMES.pull.source as string, { leaseMs: config.leaseMs, concurrency: 4, retry })
  async onMessage(message: InboxMessage, { manager, signal }: PullContext): Promise<void> {
    misbehave(message);
    // Longer than the lease: only its renewals keep the claim (a lost one aborts `signal`: rolled back).
    const { handlerMs } = payloadOf(message);
    if (handlerMs) await sleepUntil(Date.now() + handlerMs, signal);
    await this.forward(message, 'pull', manager);
  }

  @PullHandler(PATH_NAMES.batch.source as string, { batch: 10, leaseMs: config.leaseMs, concurrency: 1, retry })
  async onBatch(messages: InboxMessage[], { manager, signal }: PullBatchContext): Promise<void> {
    for (const message of messages) misbehave(message);
    const slowMs = Math.max(0, ...messages.map((message) => payloadOf(message).slowMs ?? 0));
    if (slowMs > 0) await sleepUntil(Date.now() + slowMs, signal);
    // One after the other: outbox ids follow the order the batch was handed over.
    for (const message of messages) await this.forward(message, 'batch', manager);
  }

  /** The handler's business write: the message, on to the outbox, in the handler's transaction. */
  private forward(message: InboxMessage, path: VerifyPath, manager: EntityManager) {
    return this.outbox.enqueue(manager, {
      destination: PATH_NAMES[path].destination,
      key: message.aggregateId ?? undefined,
      payload: message.payload,
    });
  }
}

const target = parseDatabaseUrl(config.url, { poolMax: config.pool });
const verifyQueries = dialectDriver(target.type).verify;
const connection = verifyQueries.withApplicationName(
  { ...target.connection, ...(config.schema ? { schema: config.schema } : {}) },
  config.applicationName,
);
const relaySource = PATH_NAMES.relay.source as string;

@Module({
  imports: [
    TypeOrmModule.forRoot({ ...connection, logging: false }),
    QueueBoxModule.forRoot({
      tables: config.tables,
      instances: { heartbeatMs: config.heartbeatMs, deadAfterMs: config.deadAfterMs },
      outbox: {
        publisher: new DestinationPublisher(),
        claimTimeoutMs: config.leaseMs,
        publishTimeout: config.publishTimeoutMs,
        shutdownTimeoutMs: config.shutdownTimeoutMs,
        pollIntervalMs: VERIFY_POLL_INTERVAL_MS,
        batchSize: 10,
        concurrency: 4,
        retry,
      },
      inbox: {
        relay: {
          claimTimeoutMs: config.leaseMs,
          shutdownTimeoutMs: config.shutdownTimeoutMs,
          pollIntervalMs: VERIFY_POLL_INTERVAL_MS,
          batchSize: 10,
          concurrency: 2,
          retry,
          routes: {
            [relaySource]: async (message, { signal }) => {
              misbehave(message);
              const { slowMs } = payloadOf(message);
              if (slowMs) await sleepUntil(Date.now() + slowMs, signal);
              return { destination: PATH_NAMES.relay.destination, key: message.aggregateId ?? undefined, payload: message.payload };
            },
          },
        },
      },
      pull: { pollIntervalMs: VERIFY_POLL_INTERVAL_MS, shutdownTimeoutMs: config.shutdownTimeoutMs },
    }),
  ],
  providers: [VerifyConsumers],
})
class VerifyWorkerModule {}

async function main(): Promise<void> {
  const app = await NestFactory.createApplicationContext(VerifyWorkerModule, {
    logger: ['error', 'warn'],
    instrument: { instanceDecorator: (instance) => (defect && isDialect(instance) ? injectDefect(instance, defect) : instance) },
  });
  app.enableShutdownHooks(['SIGTERM']);
  send({ type: 'ready' });
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
