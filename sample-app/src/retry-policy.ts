// The retry policy and publishTimeout at work (docs/retries.md), followed through the events
// (docs/events.md). Run it with `npm run example:retries` (embedded PostgreSQL unless DATABASE_URL
// is set). Three messages to a flaky "invoices" service:
//   - "flaky" fails twice, then goes through on its third attempt;
//   - "slow" hangs on its first attempt: publishTimeout aborts it, the retry goes through;
//   - "rejected" fails with an error retryIf refuses to retry: dead at once.
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { type OutboundMessage, OutboxService, type Publisher, QueueBoxEvents, QueueBoxMigrations, QueueBoxModule } from 'queuebox';
import { DataSource } from 'typeorm';
import { openDatabase } from './database';

class InvoiceRejected extends Error {}

/** Stands in for a remote service that has a bad day. */
@Injectable()
class FlakyInvoices implements Publisher {
  private readonly attempts = new Map<string, number>();

  async publish(message: OutboundMessage, signal: AbortSignal): Promise<void> {
    const { kind } = message.payload as { kind: string };
    const attempt = (this.attempts.get(kind) ?? 0) + 1;
    this.attempts.set(kind, attempt);
    if (kind === 'flaky' && attempt < 3) throw new Error(`invoices answered 503 (attempt ${attempt})`);
    if (kind === 'slow' && attempt === 1) {
      // Never answers; publishTimeout aborts the signal, which ends the wait.
      await new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true }));
    }
    if (kind === 'rejected') throw new InvoiceRejected('invoice 42 has no customer');
  }
}

async function main(): Promise<void> {
  const database = await openDatabase();
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: database.url,
        migrations: [...QueueBoxMigrations],
        migrationsRun: true,
        logging: false,
      }),
      QueueBoxModule.forRoot({
        outbox: {
          publisher: FlakyInvoices, // a class: Nest creates it
          pollIntervalMs: 100,
          publishTimeout: '300ms',
          retry: {
            attempts: 5,
            backoff: { delay: '50ms', factor: 2, maxDelay: '1s', jitter: false },
            retryIf: (error) => !(error instanceof InvoiceRejected),
          },
        },
      }),
    ],
  })
  class RetriesExample {}

  const app = await NestFactory.createApplicationContext(RetriesExample, { logger: ['error'] });
  try {
    const events = app.get(QueueBoxEvents);
    const kindOf = new Map<string, string>();
    const finished = new Promise<void>((resolve) => {
      let left = 3;
      const done = () => --left === 0 && resolve();
      events.on('queuebox:retry-scheduled', (e) =>
        console.log(`${kindOf.get(e.messageId)}: attempt ${e.attempt} failed (${e.error}); retry in ${e.delayMs} ms`),
      );
      events.on('queuebox:published', (e) => {
        console.log(`${kindOf.get(e.messageId)}: published on attempt ${e.attempt}`);
        done();
      });
      events.on('queuebox:dead-lettered', (e) => {
        console.log(`${kindOf.get(e.messageId)}: dead on attempt ${e.attempt}: ${e.reason}`);
        done();
      });
    });
    await app.get(DataSource).transaction(async (manager) => {
      for (const kind of ['flaky', 'slow', 'rejected']) {
        const { messageId } = await app.get(OutboxService).enqueue(manager, { destination: 'invoices', payload: { kind } });
        kindOf.set(messageId, kind);
      }
    });
    await finished;
    console.log('done: 2 published after retries, 1 dead-lettered at once');
  } finally {
    await app.close();
    await database.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
