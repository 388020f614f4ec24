import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { InboxService } from '../../lib/inbox/inbox.service';
import { WorkNotifications } from '../../lib/module/queuebox.notifications';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { PullHandler } from '../../lib/pull/pull-handler.decorator';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

const handled: string[] = [];

@Injectable()
class Handler {
  @PullHandler('signals')
  async handle(message: { idempotencyKey: string }) {
    handled.push(message.idempotencyKey);
  }
}

// Every worker here polls once a minute: only a notification can explain a prompt delivery.
const HOUR_POLL = { pollIntervalMs: 60_000 };

describeWithDatabase('LISTEN/NOTIFY wake-ups', (db) => {
  let producer: TestApp;
  let worker: TestApp;
  const publisher = new RecordingPublisher();

  before(async () => {
    producer = await createTestApp(db.url, {
      workers: false,
      pull: { sources: ['signals'] },
      inbox: { relay: { routes: { forwarded: () => [] } } },
    });
    worker = await createTestApp(
      db.url,
      {
        outbox: { publisher, ...HOUR_POLL },
        pull: HOUR_POLL,
        inbox: { relay: { ...HOUR_POLL, routes: { forwarded: (m) => ({ destination: 'd', payload: m.payload }) } } },
      },
      { providers: [Handler] },
    );
    // The start-up claims found nothing; the loops now sleep for a minute.
    await eventually(async () => worker.get(WorkNotifications).listening, 'the listener to be up');
  });
  after(async () => {
    await worker?.app.close();
    await producer?.app.close();
  });

  const enqueue = (payload: unknown) =>
    producer.app
      .get<DataSource>(getDataSourceToken())
      .transaction((manager) => producer.get(OutboxService).enqueue(manager, { destination: 'd', payload }));

  it('a message committed by another process is published at once, not at the next poll', async () => {
    const started = Date.now();
    await enqueue('first');
    await publisher.waitForCalls(1);
    assert.ok(Date.now() - started < 5000, `published after ${Date.now() - started} ms`);
  });

  it('a rolled-back enqueue notifies nobody', async () => {
    const calls = publisher.calls.length;
    await assert.rejects(
      producer.app.get<DataSource>(getDataSourceToken()).transaction(async (manager) => {
        await producer.get(OutboxService).enqueue(manager, { destination: 'd', payload: 'never' });
        throw new Error('rollback');
      }),
    );
    await enqueue('second');
    await publisher.waitForCalls(calls + 1);
    assert.deepEqual(
      publisher.calls.slice(calls).map((c) => c.message.payload),
      ['second'],
    );
  });

  it('inbox messages wake the pull worker of their source, and the relay, whose forward wakes the poller', async () => {
    let started = Date.now();
    await producer.get(InboxService).receive({ source: 'signals', idempotencyKey: 's1', payload: {} });
    await eventually(async () => handled.includes('s1'), 'the pull handler to run', 5000);
    assert.ok(Date.now() - started < 5000);
    const calls = publisher.calls.length;
    started = Date.now();
    await producer.get(InboxService).receive({ source: 'forwarded', idempotencyKey: 'f1', payload: 'relayed' });
    await publisher.waitForCalls(calls + 1);
    assert.equal(publisher.calls[calls].message.payload, 'relayed');
    assert.ok(Date.now() - started < 5000, `relayed and published after ${Date.now() - started} ms`);
  });

  it('reconnects after the notification connection is killed, and wakes workers again', async () => {
    const notifications = worker.get(WorkNotifications);
    await db.query(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()",
    );
    await eventually(async () => !notifications.listening, 'the listener to notice');
    await eventually(async () => notifications.listening, 'the listener to reconnect', 10_000);
    const calls = publisher.calls.length;
    const started = Date.now();
    await enqueue('after reconnect');
    await publisher.waitForCalls(calls + 1);
    assert.ok(Date.now() - started < 5000);
  });
});
