// Per-message log lines (`logging: { messages }`) under Nest's default logger, whose levels include
// debug: off by default, one debug line per published and per processed message when turned on.
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { ConsoleLogger, Injectable, Logger, type LogLevel, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { InboxService } from '../../lib/inbox/inbox.service';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { PullWorker } from '../../lib/pull/pull.worker';
import { PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { QueueBoxModuleOptions } from '../../lib/types/options';
import { describeWithDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

/** Nest's own console logger, default levels and all, keeping what it would print instead of printing it. */
class CapturingConsoleLogger extends ConsoleLogger {
  readonly printed: { level: LogLevel | undefined; context: string | undefined; text: string }[] = [];
  protected override printMessages(messages: unknown[], context?: string, logLevel?: LogLevel): void {
    for (const message of messages) this.printed.push({ level: logLevel, context, text: String(message) });
  }
}

@Injectable()
class LedgerHandler {
  @PullHandler('ledger')
  async handle() {}
}

describeWithDatabase('per-message logs under Nest’s default logger', (db) => {
  /** Starts an app, publishes 3 outbox messages and handles 2 pulled ones, and returns what the logger printed. */
  async function run(logging: QueueBoxModuleOptions['logging']) {
    const publisher = new RecordingPublisher();
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, logging: false }),
        QueueBoxModule.forRoot({ workers: false, outbox: { publisher }, ...(logging === undefined ? {} : { logging }) }),
      ],
      providers: [LedgerHandler],
    })
    class AppModule {}
    const logger = new CapturingConsoleLogger();
    const app = await NestFactory.createApplicationContext(AppModule, { logger, abortOnError: false });
    try {
      assert.ok(Logger.isLevelEnabled('debug'), 'Nest’s default logger has debug on: the option alone must quiet the lines');
      const dataSource = app.get<DataSource>(getDataSourceToken());
      await dataSource.transaction((manager) =>
        app.get(OutboxService).enqueueMany(
          manager,
          [1, 2, 3].map((n) => ({ destination: 'billing', key: 'k', payload: { n } })),
        ),
      );
      for (const n of [1, 2]) await app.get(InboxService).receive({ source: 'ledger', idempotencyKey: `e${n}`, payload: { n } });
      while ((await app.get(OutboxPoller).runOnce()) > 0);
      while ((await app.get(PullWorker).runOnce('ledger')) > 0);
      assert.equal(publisher.delivered.length, 3);
      return logger.printed.filter((line) => line.context === 'QueueBox:Events');
    } finally {
      await app.close();
      await db.query('TRUNCATE queuebox_outbox, queuebox_inbox');
    }
  }

  it('is quiet by default: no line per published or processed message', async () => {
    assert.deepEqual(await run(undefined), []);
    assert.deepEqual(await run({}), []);
    assert.deepEqual(await run({ messages: false }), []);
  });

  it('with logging: { messages: true }, one debug line per published and per processed message', async () => {
    const lines = await run({ messages: true });
    assert.deepEqual(
      lines.map((line) => line.level),
      ['debug', 'debug', 'debug', 'debug', 'debug'],
    );
    assert.equal(
      lines.filter((line) => /^outbox message [0-9a-f-]{36} published to "billing" \(attempt 1, \d+ ms\)$/.test(line.text)).length,
      3,
    );
    assert.deepEqual(
      lines.filter((line) => line.text.startsWith('pull message')).map((line) => line.text.replace(/\d+ ms/, 'N ms')),
      ['pull message ledger/e1 processed (attempt 1, N ms)', 'pull message ledger/e2 processed (attempt 1, N ms)'],
    );
  });
});
