// Retry-After through the whole outbox (issue 41, item 3): a 429 or 503 with Retry-After sets the
// row's next attempt by the database clock to what the destination asked (not the backoff), the
// attempt counts, and last_error says it was told to wait.
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { HttpPublisher } from '../../lib/publishers/http.publisher';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase } from '../support/database';
import { HttpRecorder } from '../support/http-recorder';

describeWithDatabase('HttpPublisher Retry-After through the outbox (PostgreSQL)', { truncate: ['queuebox_outbox'] }, (db) => {
  const recorder = new HttpRecorder();
  let t: TestApp;
  let outbox: OutboxService;
  let poller: OutboxPoller;
  let dataSource: DataSource;

  before(async () => {
    const base = await recorder.start();
    t = await createTestApp(db.url, {
      outbox: {
        publisher: new HttpPublisher({ destinations: { partner: `${base}/events` }, maxRetryAfterMs: 600_000 }),
        // A backoff far from every Retry-After below: the delay seen is the destination's.
        retry: { attempts: 5, backoff: { delay: '10ms', maxDelay: '10ms', jitter: false } },
      },
      workers: false,
    });
    outbox = t.get(OutboxService);
    poller = t.get(OutboxPoller);
    dataSource = t.app.get(getDataSourceToken());
  });
  after(async () => {
    await t?.app.close();
    await recorder.stop();
  });

  /** Publishes one message once against `answer`; the row after it, with its wait by the database clock. */
  async function attemptAgainst(answer: { status: number; headers: Record<string, string> }) {
    recorder.responder = () => answer;
    await dataSource.transaction((m) => outbox.enqueue(m, { destination: 'partner', key: 'k', payload: { n: 1 } }));
    assert.equal(await poller.runOnce(), 1);
    const [row] = await db.query<{ state: string; attempts: number; last_error: string; wait_ms: number }>(
      `SELECT state, attempts, last_error, (extract(epoch FROM available_at - now()) * 1000)::int AS wait_ms FROM queuebox_outbox`,
    );
    return row;
  }

  it('429 with Retry-After in seconds: the next attempt that much later, the attempt counted, last_error saying so', async () => {
    const row = await attemptAgainst({ status: 429, headers: { 'retry-after': '120' } });
    assert.equal(row.state, 'pending');
    assert.equal(row.attempts, 1);
    assert.match(
      row.last_error,
      /HTTP 429 from http:\/\/127\.0\.0\.1:\d+\/events: told to wait \(Retry-After: 120\); next attempt in 120000 ms/,
    );
    assert.ok(row.wait_ms > 115_000 && row.wait_ms <= 120_000, `waits ${row.wait_ms} ms`);
    assert.equal(await poller.runOnce(), 0, 'not claimed before then');
  });

  it('503 with an HTTP date, beyond maxRetryAfterMs: capped, and said so', async () => {
    const row = await attemptAgainst({
      status: 503,
      headers: { date: 'Wed, 01 Jan 2020 00:00:00 GMT', 'retry-after': 'Thu, 02 Jan 2020 00:00:00 GMT' },
    });
    assert.match(row.last_error, /told to wait \(Retry-After: Thu, 02 Jan 2020 00:00:00 GMT\); next attempt in 600000 ms \(capped/);
    assert.ok(row.wait_ms > 595_000 && row.wait_ms <= 600_000, `waits ${row.wait_ms} ms`);
  });

  it('a 503 without Retry-After takes the backoff', async () => {
    const row = await attemptAgainst({ status: 503, headers: {} });
    assert.equal(row.last_error.includes('told to wait'), false);
    assert.ok(row.wait_ms <= 10, `waits ${row.wait_ms} ms`);
  });
});
