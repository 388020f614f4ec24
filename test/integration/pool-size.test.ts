import assert from 'node:assert/strict';
import { before, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import { InboxService } from '../../lib/inbox/inbox.service';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { type PullContext, PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { InboxMessage } from '../../lib/types/messages';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

@Injectable()
class TallyHandler {
  @PullHandler('tally', { leaseMs: 5000 })
  async handle(message: InboxMessage, { manager }: PullContext) {
    await manager.query('INSERT INTO tally (idempotency_key) VALUES ($1)', [message.idempotencyKey]);
  }
}

describeWithDatabase('the pool must hold the LISTEN and renewal connections plus one', (db) => {
  before(async () => {
    await db.query('CREATE TABLE tally (id serial PRIMARY KEY, idempotency_key text)');
  });

  const tooSmall = (minimum: number) => (error: unknown) =>
    error instanceof QueueBoxConfigError && error.option === 'dataSource' && error.message.includes(`needs at least ${minimum}`);
  // An app that starts when it should not is closed before the test fails, so the run can end.
  const closedIfStarted = (starting: Promise<TestApp>) =>
    starting.then(async (started) => {
      await started.app.close();
      return started;
    });

  it('pool 1 with the outbox worker fails start-up: the LISTEN connection would hold the only one', async () => {
    await assert.rejects(
      closedIfStarted(
        createTestApp(db.url, { workers: { relay: false, pull: false }, outbox: { publisher: new RecordingPublisher() } }, { poolSize: 1 }),
      ),
      tooSmall(2),
    );
  });

  it('pool 2 with a @PullHandler fails start-up: LISTEN and renewals would leave none for the handler', async () => {
    await assert.rejects(
      closedIfStarted(
        createTestApp(
          db.url,
          { workers: { outbox: false, relay: false }, pull: { pollIntervalMs: 10 } },
          { poolSize: 2, providers: [TallyHandler] },
        ),
      ),
      (error: unknown) => tooSmall(3)(error) && /LISTEN.*lease renewals/.test((error as Error).message),
    );
  });

  it('pool 2 publishes with the outbox worker', { timeout: 30_000 }, async () => {
    const publisher = new RecordingPublisher();
    const t = await createTestApp(
      db.url,
      { workers: { relay: false, pull: false }, outbox: { publisher, pollIntervalMs: 10 } },
      { poolSize: 2 },
    );
    try {
      const dataSource = t.app.get<DataSource>(getDataSourceToken());
      await dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'billing', payload: { n: 1 } }));
      await publisher.waitForCalls(1);
      await eventually(
        async () => (await db.query("SELECT 1 FROM queuebox_outbox WHERE state = 'sent'")).length === 1,
        'the row to be sent',
      );
    } finally {
      await t.app.close();
    }
  });

  it('pool 3 runs a @PullHandler, and receive() still gets a connection', { timeout: 30_000 }, async () => {
    const t = await createTestApp(
      db.url,
      { workers: { outbox: false, relay: false }, pull: { pollIntervalMs: 10 } },
      { poolSize: 3, providers: [TallyHandler] },
    );
    try {
      for (let n = 0; n < 5; n++) await t.get(InboxService).receive({ source: 'tally', idempotencyKey: `t${n}`, payload: {} });
      await eventually(
        async () => (await db.query("SELECT 1 FROM queuebox_inbox WHERE state <> 'processed'")).length === 0,
        'every message to be processed',
      );
      assert.equal((await db.query('SELECT id FROM tally')).length, 5);
    } finally {
      await t.app.close();
    }
  });
});
