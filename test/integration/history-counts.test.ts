// The history's kept counts (admin/history-counts.ts) on a real PostgreSQL, with a clock the test
// moves: every read equals a fresh count of the rows (an oracle that buckets them in JavaScript),
// as time moves on, as windows grow and shrink and as reads overlap; and a settled bucket is read
// from the table once, so a read costs the buckets since the last one.
import assert from 'node:assert/strict';
import { after, before, beforeEach, it } from 'node:test';
import { HistoryCounts } from '../../lib/admin/history-counts';
import { QUEUEBOX_DIALECT } from '../../lib/common/queuebox.constants';
import type { Dialect } from '../../lib/dialects/dialect';
import type { ThroughputRow } from '../../lib/dialects/dialect-rows';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

const HOUR = 3_600_000;
const MINUTE = 60_000;
/** The test's "now" starts here, mid-hour and mid-minute. */
const START = Date.parse('2026-12-01T12:30:30Z');

describeWithDatabase('History counts kept per settled bucket (PostgreSQL)', { truncate: ['queuebox_outbox', 'queuebox_inbox'] }, (db) => {
  let t: TestApp;
  let dialect: Dialect;
  let now: number;
  /** The ranges the counts asked the table for: [since, buckets]. */
  let reads: [string, number][];
  let counts: HistoryCounts;

  before(async () => {
    t = await createTestApp(db.url, { workers: false, outbox: { publisher: new RecordingPublisher() } });
    dialect = t.app.get<Dialect>(QUEUEBOX_DIALECT);
  });
  after(async () => {
    await t?.app.close();
  });
  beforeEach(() => {
    now = START;
    reads = [];
    const recording: Pick<Dialect, 'adminHistory'> = {
      adminHistory: (p) => {
        reads.push([p.since.toISOString(), p.buckets]);
        return dialect.adminHistory(p);
      },
    };
    counts = new HistoryCounts(recording, async () => new Date(now));
  });

  /** Rows of both tables finished or dead at these instants (ms), spread over names. */
  const insert = async (instants: number[]) => {
    const at = instants.map((ms) => new Date(ms).toISOString());
    await db.query(
      `INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, sent_at, claimed_at)
       SELECT gen_random_uuid(), CASE WHEN i % 3 = 0 THEN 'crm' ELSE 'billing' END, '{}',
              CASE WHEN i % 5 = 0 THEN 'dead' ELSE 'sent' END, 1,
              CASE WHEN i % 5 = 0 THEN NULL ELSE a END, a
       FROM unnest($1::timestamptz[]) WITH ORDINALITY AS x(a, i)`,
      [at],
    );
    await db.query(
      `INSERT INTO queuebox_inbox (source, idempotency_key, payload, state, attempts, received_at, processed_at, claimed_at)
       SELECT 'orders', gen_random_uuid()::text, '{}', CASE WHEN i % 4 = 0 THEN 'dead' ELSE 'processed' END, 1, a,
              CASE WHEN i % 4 = 0 THEN NULL ELSE a END, a
       FROM unnest($1::timestamptz[]) WITH ORDINALITY AS x(a, i)`,
      [at],
    );
  };
  /** 0 to 3 rows in each hour of the 9 days before START, some on the hour exactly. */
  const week = () =>
    Array.from({ length: 9 * 24 }, (_, h) => {
      const hour = Math.floor(START / HOUR) * HOUR - h * HOUR;
      return [hour, hour + 17 * MINUTE + 3_000, hour + HOUR - 1].slice(0, h % 4);
    }).flat();

  /** What the tables hold, bucketed here: one series per (component, name), as the read returns. */
  const oracle = async (bucketMs: number, buckets: number, byName = true): Promise<ThroughputRow[]> => {
    const rows = await db.query<{ component: 'outbox' | 'inbox'; name: string; outcome: 'finished' | 'dead'; at: Date }>(
      `SELECT 'outbox' AS component, destination AS name, CASE state WHEN 'dead' THEN 'dead' ELSE 'finished' END AS outcome,
              coalesce(sent_at, claimed_at) AS at FROM queuebox_outbox WHERE state IN ('sent', 'dead')
       UNION ALL
       SELECT 'inbox', source, CASE state WHEN 'dead' THEN 'dead' ELSE 'finished' END, coalesce(processed_at, claimed_at)
       FROM queuebox_inbox WHERE state IN ('processed', 'dead')`,
    );
    const since = Math.floor(now / bucketMs) * bucketMs - (buckets - 1) * bucketMs;
    const series = new Map<string, ThroughputRow>();
    for (const r of rows) {
      const bucket = Math.floor((r.at.getTime() - since) / bucketMs);
      if (bucket < 0 || bucket >= buckets) continue;
      const name = byName ? r.name : '';
      const id = `${r.component}/${name}`;
      if (!series.has(id))
        series.set(id, { component: r.component, name, finished: new Array(buckets).fill(0), dead: new Array(buckets).fill(0) });
      (series.get(id) as ThroughputRow)[r.outcome][bucket] += 1;
    }
    return [...series.values()].sort((a, b) =>
      a.component === b.component ? a.name.localeCompare(b.name) : a.component === 'outbox' ? -1 : 1,
    );
  };
  const read = (bucket: 'hour' | 'minute', buckets: number, byName = true) => counts.read({ bucket, buckets, byName });
  const agrees = async (bucket: 'hour' | 'minute', buckets: number, what: string, byName = true) => {
    const history = await read(bucket, buckets, byName);
    const size = bucket === 'hour' ? HOUR : MINUTE;
    assert.equal(history.since.getTime(), Math.floor(now / size) * size - (buckets - 1) * size, `${what}: since`);
    assert.deepEqual(history.rows, await oracle(size, buckets, byName), what);
    return history;
  };
  const iso = (ms: number) => new Date(ms).toISOString();

  it('a week per hour as time moves on: each read equals a fresh count; a settled hour is read from the table once', async () => {
    await insert(week());
    const hour = Math.floor(START / HOUR) * HOUR;
    await agrees('hour', 168, 'the first read');
    assert.deepEqual(
      reads,
      [
        [iso(hour - 167 * HOUR), 166],
        [iso(hour - HOUR), 2],
      ],
      'the first read counts the window: the settled hours (ended an hour ago or more), then the last two',
    );

    // Three hours later, with rows in them (on the hour too) and in the hour that was current.
    now = START + 3 * HOUR;
    await insert([hour + 5 * MINUTE, hour + HOUR, hour + 2 * HOUR + 59 * MINUTE, hour + 3 * HOUR, now]);
    reads = [];
    await agrees('hour', 168, 'three hours later');
    assert.deepEqual(
      reads,
      [
        [iso(hour - HOUR), 3],
        [iso(hour + 2 * HOUR), 2],
      ],
      'only the hours settled since the last read, then the last two',
    );
    reads = [];
    await agrees('hour', 24, 'a shorter window');
    assert.deepEqual(reads, [[iso(hour + 2 * HOUR), 2]], 'a shorter window reads the last two hours only');
    await agrees('hour', 168, 'per component', false);

    // A row finished in a settled hour after it was counted (a commit more than an hour after its
    // stamp) stays out: the hour is not read again.
    await insert([hour - 10 * HOUR]);
    reads = [];
    const history = await read('hour', 168);
    assert.equal(reads.length, 1, 'the last two hours only');
    const expected = await oracle(HOUR, 168);
    const late = 167 - 13; // hour - 10 h in the window that ends at hour + 3 h
    for (const series of expected.filter((s) => s.name === 'billing' || s.name === 'orders')) series.finished[late] -= 1;
    assert.deepEqual(history.rows, expected, 'the late row (billing, orders) is not counted');
  });

  it('per minute over a day, a window that grows, reads that overlap, and a clock a week on', async () => {
    const minute = Math.floor(START / MINUTE) * MINUTE;
    await insert([...week(), ...Array.from({ length: 300 }, (_, i) => minute - i * 7 * MINUTE + (i % 60) * 1000)]);
    await agrees('minute', 60, 'the last hour per minute');
    assert.equal(reads.length, 1, 'no minute of the last hour is settled');
    await agrees('minute', 1440, 'a day per minute');
    now += 5 * MINUTE;
    await insert([minute + 2 * MINUTE, minute + 4 * MINUTE + 59_999]);
    reads = [];
    await agrees('minute', 1440, 'five minutes later');
    assert.deepEqual(reads[0], [iso(minute - 60 * MINUTE), 5], 'the five minutes settled since');

    await agrees('hour', 24, 'a day per hour');
    await agrees('hour', 168, 'the window grows to a week');
    now += 2 * HOUR;
    const overlapping = await Promise.all([read('hour', 168), read('hour', 24), read('hour', 168, false), read('hour', 100)]);
    for (const [i, buckets] of [168, 24, 168, 100].entries()) {
      assert.deepEqual(overlapping[i].rows, await oracle(HOUR, buckets, i !== 2), `overlapping read ${i}`);
    }
    await agrees('hour', 168, 'after the overlapping reads');

    now += 8 * 24 * HOUR;
    await insert([now - 30 * HOUR, now - 3 * HOUR, now]);
    await agrees('hour', 168, 'a week later: nothing kept is in the window');
    await agrees('minute', 1440, 'a week later per minute');
  });
});
