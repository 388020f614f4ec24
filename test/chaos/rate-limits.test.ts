// Polite publishing across replicas (issue 41, item 3): three worker processes publish to a local
// HTTP server. With a rate limit on the destination, the server never receives more than the
// token bucket allows, whichever replica sends; put-off messages are charged no attempt; every
// key keeps its order. When the server answers 429 with Retry-After, the message waits that long,
// its key waits behind it, and the other keys go on.
import assert from 'node:assert/strict';
import { before, it } from 'node:test';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { useChaosBench } from '../support/chaos-bench';
import { describeWithDatabase, eventually } from '../support/database';
import type { RecordedRequest } from '../support/http-recorder';
import { startWorker } from '../support/processes';

const RATE = 10; // messages a second
const BURST = 3;
const KEYS = 5;
const PER_KEY = 6;

const payloadOf = (request: RecordedRequest) => JSON.parse(request.body) as { name: string; key: string; seq: number };

describeWithDatabase('chaos: rate limits and Retry-After with three replica processes', (db) => {
  const bench = useChaosBench(db);
  const { workers } = bench;

  before(async () => {
    const options = {
      workers: { outbox: true, relay: false, pull: false },
      outbox: {
        pollIntervalMs: 20,
        claimTimeoutMs: 10_000,
        batchSize: 10,
        retry: { attempts: 5, backoff: { delay: '10ms', maxDelay: '10ms', jitter: false } },
        rateLimits: { partner: { limit: RATE, per: '1s', burst: BURST } },
      },
    };
    for (const name of ['w1', 'w2', 'w3']) workers.push(await startWorker({ dbUrl: db.url, publishUrl: bench.publishUrl, name, options }));
  });

  const enqueue = (destination: string, messages: { name: string; key: string; seq: number }[]) =>
    bench.dataSource.transaction((manager) =>
      bench.producer.get(OutboxService).enqueueMany(
        manager,
        messages.map((m) => ({ destination, key: m.key, payload: m })),
      ),
    );

  it('a rate limit shared by every replica: never above the bucket, no attempt charged, keys in order', async () => {
    bench.recorder.responder = () => 200;
    const messages = Array.from({ length: KEYS * PER_KEY }, (_, i) => ({ name: `p-${i}`, key: `k${i % KEYS}`, seq: Math.floor(i / KEYS) }));
    await enqueue('partner', messages);
    const accepted = () => bench.recorder.accepted().filter((r) => r.path === '/partner');
    await eventually(async () => accepted().length >= messages.length, 'every message to be published', 60_000);
    const requests = accepted();
    assert.equal(new Set(requests.map((r) => payloadOf(r).name)).size, messages.length, 'each message once');
    // The token bucket's bound: in any second, at most BURST + RATE (one more for the time between
    // a grant, by the database clock, and the request's arrival).
    const times = requests.map((r) => r.receivedAt).sort((a, b) => a - b);
    for (let i = 0; i < times.length; i++) {
      const inSecond = times.filter((t) => t >= times[i] && t < times[i] + 1000).length;
      assert.ok(inSecond <= BURST + RATE + 1, `${inSecond} requests in the second from ${i}`);
    }
    const spanMs = times[times.length - 1] - times[0];
    assert.ok(spanMs >= ((messages.length - BURST - RATE) / RATE) * 1000, `${messages.length} messages took ${spanMs} ms`);
    // Keys kept their order.
    for (let k = 0; k < KEYS; k++) {
      const seqs = requests.filter((r) => payloadOf(r).key === `k${k}`).map((r) => payloadOf(r).seq);
      assert.deepEqual(seqs, [...Array(PER_KEY).keys()], `key k${k} in order`);
    }
    // Put-off claims were charged nothing: every row sent on its one real attempt. The destination
    // answers before the worker marks the row sent, so the last rows may still be finishing.
    const partnerRows = () =>
      db.query<{ state: string; attempts: number }>(`SELECT state, attempts FROM queuebox_outbox WHERE destination = 'partner'`);
    await eventually(
      async () => (await partnerRows()).every((row) => row.state !== 'processing'),
      'the last publishes to be marked',
      10_000,
    );
    const rows = await partnerRows();
    assert.ok(
      rows.every((row) => row.state === 'sent' && row.attempts === 1),
      JSON.stringify(rows.filter((row) => row.state !== 'sent' || row.attempts !== 1)),
    );
    const senders = new Set(requests.map((r) => r.headers['x-worker']));
    assert.ok(senders.size >= 2, `sent by ${[...senders].join(', ')}: the bucket is shared`);
    const [bucket] = await db.query<{ tokens: number }>(`SELECT tokens FROM queuebox_outbox_rate_limits WHERE destination = 'partner'`);
    assert.ok(bucket.tokens >= 0 && bucket.tokens <= BURST);
  });

  it('429 with Retry-After: the message waits that long, its key behind it, other keys go on', async () => {
    let toldToWaitAt = 0;
    bench.recorder.responder = (request) => {
      if (payloadOf(request).name === 'r-0' && toldToWaitAt === 0) {
        toldToWaitAt = Date.now();
        return { status: 429, headers: { 'retry-after': '2' } };
      }
      return 200;
    };
    await enqueue('told', [
      { name: 'r-0', key: 'r', seq: 0 },
      { name: 'r-1', key: 'r', seq: 1 },
    ]);
    await eventually(async () => toldToWaitAt > 0, 'the 429');
    await enqueue(
      'told',
      Array.from({ length: 4 }, (_, i) => ({ name: `u-${i}`, key: `u${i}`, seq: 0 })),
    );
    const told = () => bench.recorder.accepted().filter((r) => r.path === '/told');
    await eventually(async () => told().length === 6, 'every message to be published', 30_000);
    const at = (name: string) => told().find((r) => payloadOf(r).name === name)?.receivedAt ?? Number.NaN;
    assert.ok(at('r-0') - toldToWaitAt >= 1900, `r-0 waited ${at('r-0') - toldToWaitAt} ms after its 429 (Retry-After: 2)`);
    assert.ok(at('r-1') > at('r-0'), 'its key waited behind it');
    for (let i = 0; i < 4; i++) assert.ok(at(`u-${i}`) < at('r-0'), `u-${i} did not wait for key r`);
    const [row] = await db.query<{ attempts: number; last_error: string }>(
      `SELECT attempts, last_error FROM queuebox_outbox WHERE payload->>'name' = 'r-0'`,
    );
    assert.equal(row.attempts, 2);
    assert.match(row.last_error, /told to wait \(Retry-After: 2\); next attempt in 2000 ms/);
  });

  it('the replicas counted the time messages waited for the limit', async () => {
    for (const worker of workers) worker.child.kill('SIGTERM');
    await Promise.all(workers.map((worker) => worker.exited));
    const sum = (name: string) => workers.reduce((total, worker) => total + (worker.metrics()[`${name}{destination="partner"}`] ?? 0), 0);
    assert.ok(sum('queuebox_outbox_rate_limited_total') > 0, 'messages were put off');
    assert.ok(sum('queuebox_outbox_rate_limited_seconds_total') > 0, 'and the time they waited counted');
    assert.equal(sum('queuebox_outbox_messages_published_total'), KEYS * PER_KEY);
  });
});
