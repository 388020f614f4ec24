import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { InboxRelay } from '../../lib/inbox/inbox.relay';
import { InboxService } from '../../lib/inbox/inbox.service';
import { PullWorker } from '../../lib/pull/pull.worker';
import { PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { InboxMessage } from '../../lib/types/messages';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase } from '../support/database';

@Injectable()
class FailingHandlers {
  @PullHandler('once', { retry: false })
  async once() {
    throw new Error('handler failed');
  }

  @PullHandler('picky', {
    retry: { attempts: 5, retryIf: (error) => !(error instanceof TypeError), backoff: { delay: '20s', jitter: false } },
  })
  async picky(message: InboxMessage) {
    throw (message.payload as { bad?: boolean }).bad ? new TypeError('malformed') : new Error('downstream busy');
  }
}

describeWithDatabase('the retry policy of the inbox relay and pull handlers', (db) => {
  let t: TestApp;
  const backoffCalls: [number, string, string][] = [];

  before(async () => {
    t = await createTestApp(
      db.url,
      {
        workers: false,
        inbox: {
          relay: {
            routes: {
              orders: (message) => {
                throw (message.payload as { bad?: boolean }).bad ? new TypeError('no customer') : new Error('not yet');
              },
            },
            retry: {
              attempts: 4,
              retryIf: (error) => !(error instanceof TypeError),
              backoff: (attempt, error, message) => {
                backoffCalls.push([attempt, String(error), message.idempotencyKey]);
                return 30_000;
              },
            },
          },
        },
      },
      { providers: [FailingHandlers] },
    );
  });
  after(async () => {
    await t?.app.close();
  });

  const row = async (source: string, key: string) =>
    (
      await db.query<{ state: string; attempts: number; last_error: string | null; delay_ms: number }>(
        `SELECT state, attempts, last_error, (extract(epoch FROM available_at - clock_timestamp()) * 1000)::int AS delay_ms
           FROM queuebox_inbox WHERE source = $1 AND idempotency_key = $2`,
        [source, key],
      )
    )[0];

  it('relay: retryIf false dead-letters now; otherwise the backoff function gets (attempt, error, message)', async () => {
    const inbox = t.get(InboxService);
    await inbox.receive({ source: 'orders', idempotencyKey: 'bad-1', payload: { bad: true } });
    await inbox.receive({ source: 'orders', idempotencyKey: 'later-1', payload: {} });
    await t.get(InboxRelay).runOnce();
    const bad = await row('orders', 'bad-1');
    assert.deepEqual([bad.state, bad.attempts], ['dead', 1]);
    assert.match(bad.last_error ?? '', /not retried \("retryIf" returned false\) after attempt 1: TypeError: no customer/);
    const later = await row('orders', 'later-1');
    assert.deepEqual([later.state, later.attempts], ['pending', 1]);
    assert.ok(later.delay_ms > 25_000, `the function's delay (${later.delay_ms} ms)`);
    assert.deepEqual(backoffCalls, [[1, 'Error: not yet', 'later-1']]);
  });

  it('pull: retry false dead-letters on the first failure; retryIf and duration backoff per handler', async () => {
    const inbox = t.get(InboxService);
    const worker = t.get(PullWorker);
    await inbox.receive({ source: 'once', idempotencyKey: 'o1', payload: {} });
    await inbox.receive({ source: 'picky', idempotencyKey: 'p-bad', payload: { bad: true } });
    await inbox.receive({ source: 'picky', idempotencyKey: 'p-busy', payload: {} });
    await worker.runOnce('once');
    while ((await worker.runOnce('picky')) > 0);
    const once = await row('once', 'o1');
    assert.deepEqual([once.state, once.attempts], ['dead', 1]);
    assert.match(once.last_error ?? '', /failed 1 attempt\(s\); last error: Error: handler failed/);
    const bad = await row('picky', 'p-bad');
    assert.deepEqual([bad.state, bad.attempts], ['dead', 1]);
    assert.match(bad.last_error ?? '', /"retryIf" returned false/);
    const busy = await row('picky', 'p-busy');
    assert.deepEqual([busy.state, busy.attempts], ['pending', 1]);
    assert.ok(busy.delay_ms > 15_000 && busy.delay_ms <= 20_000, `backoff.delay '20s' (${busy.delay_ms} ms)`);
  });
});
