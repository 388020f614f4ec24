import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createTestDatabase, eventually, type TestDatabase } from '../support/database';
import { HttpRecorder } from '../support/http-recorder';
import { startFixture } from '../support/processes';

// Issue 27, part 2, with real processes: two replicas of an application with three databases (the
// default QueueBox, a named one on a second DataSource, and a tenant attached at run time), each
// replica enqueueing to all three. One replica is killed with SIGKILL mid-backlog. Every message
// must reach its own destination (never another database's), in key order of first deliveries,
// with duplicates only from the killed replica; every payment must be handled once, in its own
// database, by the handler of its QueueBox.

const DATABASES = ['orders', 'ledger', 'acme'] as const;
const PER_DB = 40;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('several databases, two replicas, one killed', () => {
  const dbs = {} as Record<(typeof DATABASES)[number], TestDatabase>;
  const recorder = new HttpRecorder();
  let publishUrl: string;
  const children: Awaited<ReturnType<typeof startFixture>>[] = [];
  const hangFor = 'r1';

  before(async () => {
    for (const name of DATABASES) {
      dbs[name] = await createTestDatabase();
      await dbs[name].query('CREATE TABLE handled (idempotency_key text PRIMARY KEY, worker text NOT NULL)');
    }
    publishUrl = await recorder.start();
    // r1's publishes hang: it keeps every claim it takes, in every database, until it is killed
    // and r2 takes them over. r2's take a moment each.
    recorder.responder = async (request) => {
      if (request.headers['x-worker'] === hangFor) return 'hang';
      await sleep(20);
      return 200;
    };
  });
  after(async () => {
    for (const { child } of children) child.kill('SIGKILL');
    await recorder.stop();
    for (const name of DATABASES) await dbs[name]?.drop();
  });

  const start = (worker: string) =>
    startFixture('several-databases.js', {
      QUEUEBOX_TEST_DB_URLS: JSON.stringify(Object.fromEntries(DATABASES.map((name) => [name, dbs[name].url]))),
      QUEUEBOX_TEST_PUBLISH_URL: publishUrl,
      QUEUEBOX_TEST_WORKER: worker,
      QUEUEBOX_TEST_PER_DB: String(PER_DB),
    });

  it('every message reaches its own destination, in key order, each payment is handled once in its own database', async () => {
    const [r1, r2] = [await start('r1'), await start('r2')];
    children.push(r1, r2);
    await eventually(async () => r1.output().includes('enqueued') && r2.output().includes('enqueued'), 'both to enqueue', 60_000);
    // Claims the replica about to die holds, per database.
    const heldBy = () =>
      Promise.all(
        DATABASES.map(async (name) =>
          Number(
            (
              await dbs[name].query(
                `SELECT count(*) AS n FROM queuebox_outbox o JOIN queuebox_instances n ON n.id = o.claimed_by WHERE o.state = 'processing' AND n.pid = $1`,
                [r1.child.pid],
              )
            )[0].n,
          ),
        ),
      );
    await eventually(async () => (await heldBy()).every((n) => n > 0), 'the replica to kill to hold claims in every database', 30_000, 50);
    const held = await heldBy();
    r1.child.kill('SIGKILL');
    assert.equal(await r1.exited, 'SIGKILL');
    const killedAt = Date.now();

    for (const name of DATABASES) {
      const db = dbs[name];
      await eventually(
        async () => Number((await db.query(`SELECT count(*) AS n FROM queuebox_outbox WHERE state <> 'sent'`))[0].n) === 0,
        `${name}'s outbox to drain`,
        60_000,
        100,
      );
      await eventually(
        async () => Number((await db.query(`SELECT count(*) AS n FROM queuebox_inbox WHERE state <> 'processed'`))[0].n) === 0,
        `${name}'s payments to be handled`,
        60_000,
        100,
      );
    }
    const drainedMs = Date.now() - killedAt;

    const deliveries = recorder.requests
      .filter((r) => r.status === 200)
      .map((r) => {
        const payload = JSON.parse(r.body) as { db: string; seq: number; worker: string };
        return { path: r.path, ...payload, messageId: String(r.headers['x-message-id']), by: String(r.headers['x-worker']) };
      });
    const crossed = deliveries.filter((d) => d.path !== `/${d.db}`);
    assert.deepEqual(crossed, [], 'every message published to the destination of its own database');
    for (const name of DATABASES) {
      const db = dbs[name];
      const rows = await db.query<{ message_id: string; key: string; payload: { seq: number; worker: string } }>(
        'SELECT message_id::text AS message_id, "key", payload FROM queuebox_outbox ORDER BY id',
      );
      assert.equal(rows.length, 2 * PER_DB, `${name} holds both replicas' messages`);
      const firsts = new Map<string, (typeof deliveries)[number]>();
      for (const d of deliveries) if (!firsts.has(d.messageId)) firsts.set(d.messageId, d);
      for (const row of rows) {
        assert.ok(firsts.has(row.message_id), `${name}: ${row.payload.worker}/${row.payload.seq} was published`);
        const copies = deliveries.filter((d) => d.messageId === row.message_id);
        if (copies.length > 1) {
          assert.ok(
            copies.some((d) => d.by === 'r1'),
            `${name}: ${row.message_id} published ${copies.length} times, none by the killed r1`,
          );
        }
      }
      // Per key and producer: first deliveries in the order the rows were enqueued. (Across the two
      // producers, rows of one key may commit out of id order, which no order is promised for.)
      const byKey = new Map<string, string[]>();
      for (const row of rows) {
        const group = `${row.key} from ${row.payload.worker}`;
        byKey.set(group, [...(byKey.get(group) ?? []), row.message_id]);
      }
      const position = new Map(deliveries.map((d, n): [string, number] => [d.messageId, n]).reverse());
      for (const [key, ids] of byKey) {
        const order = ids.map((id) => position.get(id) ?? -1);
        assert.deepEqual(
          order,
          [...order].sort((a, b) => a - b),
          `${name} key ${key}: first deliveries out of order`,
        );
      }
      const handled = await db.query<{ idempotency_key: string }>('SELECT idempotency_key FROM handled ORDER BY 1');
      const expected = ['r1', 'r2'].flatMap((w) => Array.from({ length: PER_DB }, (_, seq) => `${w}-${name}-${seq}`)).sort();
      assert.deepEqual(
        handled.map((h) => h.idempotency_key),
        expected,
        `${name}: every payment handled once, in its own database`,
      );
    }
    console.log(
      `several databases: claims the killed replica held per database ${JSON.stringify(Object.fromEntries(DATABASES.map((d, n) => [d, held[n]])))}; every database drained ${drainedMs} ms after it`,
    );
    for (const name of DATABASES) {
      await eventually(
        async () => (await dbs[name].query('SELECT 1 FROM queuebox_instances WHERE pid = $1', [r1.child.pid])).length === 0,
        `${name}: the killed replica declared dead`,
        10_000,
      );
    }
    r2.child.kill('SIGTERM');
    assert.equal(await r2.exited, '0');
    for (const name of DATABASES) {
      assert.deepEqual(await dbs[name].query('SELECT pid FROM queuebox_instances'), [], `${name}: r2 deregistered, r1 was removed as dead`);
    }
  });
});
