// Dead letters grouped by cause (issue 40 item 4): counts and first/last per destination and
// fingerprint, and replay/discard per group acting only on rows whose fingerprint matches when the
// statement locks them, fenced against a replica replaying the same group at the same time.
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { createQueueBoxAdmin } from '../../lib/admin/create-queuebox-admin';
import type { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { runQueueBoxCli } from '../support/cli';
import { describeWithDatabase } from '../support/database';

/** The CLI with the test database's URL in DATABASE_URL. */
const queuebox = (args: string[], url: string) => runQueueBoxCli(args, { DATABASE_URL: url });

const TIMEOUT = 'PublishError/503: HTTP # from billing for order #';
const REFUSED = 'Error/ECONNREFUSED: connect ECONNREFUSED #.#.#.#:#';

describeWithDatabase('dead-letter groups', { truncate: ['queuebox_outbox', 'queuebox_inbox'] }, (db) => {
  const dataSources: DataSource[] = [];
  /** An admin on a DataSource (a pool, connections) of its own: another replica. */
  const replica = async (): Promise<QueueBoxAdmin> => {
    const dataSource = await new DataSource({ type: 'postgres', url: db.url, extra: { max: 2 } }).initialize();
    dataSources.push(dataSource);
    return createQueueBoxAdmin(dataSource);
  };
  let a: QueueBoxAdmin;
  let b: QueueBoxAdmin;
  before(async () => {
    a = await replica();
    b = await replica();
  });
  after(async () => {
    for (const dataSource of dataSources) await dataSource.destroy();
  });

  /** `count` dead outbox rows of `destination` with `fingerprint`, died `minutesAgo` minutes ago. */
  const dead = (destination: string, fingerprint: string | null, count: number, minutesAgo = 5) =>
    db.query(
      `INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, last_error, fingerprint, claimed_at)
       SELECT gen_random_uuid(), $1, '{}', 'dead', 3, 'failed ' || n, $2, clock_timestamp() - make_interval(mins => $4::integer) - make_interval(secs => n)
       FROM generate_series(1, $3::integer) n`,
      [destination, fingerprint, count, minutesAgo],
    );

  it('lists each destination and fingerprint with its count and when the first and last died, the biggest first', async () => {
    await dead('billing', TIMEOUT, 4, 10);
    await dead('billing', TIMEOUT, 1, 1);
    await dead('billing', REFUSED, 2);
    await dead('shipping', TIMEOUT, 3);
    await dead('billing', null, 1);
    await db.query(
      `INSERT INTO queuebox_outbox (message_id, destination, payload, state, fingerprint) VALUES (gen_random_uuid(), 'billing', '{}', 'pending', $1)`,
      [TIMEOUT],
    );
    const groups = await a.deadLetterGroups({ component: 'outbox' });
    assert.deepEqual(
      groups.map((g) => [g.name, g.fingerprint, g.count]),
      [
        ['billing', TIMEOUT, 5],
        ['shipping', TIMEOUT, 3],
        ['billing', REFUSED, 2],
        ['billing', null, 1],
      ],
      'dead rows only; the same fingerprint on two destinations is two groups; rows from before the attempts migration form their own',
    );
    const [timeouts] = groups;
    assert.ok(timeouts.lastDeadAt.getTime() - timeouts.firstDeadAt.getTime() > 8 * 60_000, 'first ~10 min ago, last ~1 min ago');
    assert.deepEqual(await a.deadLetterGroups({ component: 'inbox' }), []);
    assert.equal(await a.countDeadLetters({ component: 'outbox', name: 'billing', fingerprint: TIMEOUT }), 5);
    const listed = await a.listDeadLetters({ component: 'outbox', name: 'billing', fingerprint: REFUSED });
    assert.deepEqual(
      listed.rows.map((r) => r.fingerprint),
      [REFUSED, REFUSED],
    );
  });

  it('replays one group only; two replicas replaying it at once replay each row once', async () => {
    await dead('billing', TIMEOUT, 2500);
    await dead('billing', REFUSED, 7);
    await dead('shipping', TIMEOUT, 5);
    const group = { component: 'outbox' as const, name: 'billing', fingerprint: TIMEOUT };
    const [first, second] = await Promise.all([a.replayDeadLetters(group), b.replayDeadLetters(group)]);
    assert.equal(first + second, 2500, `replayed ${first} + ${second}`);
    assert.deepEqual(
      await db.query(
        `SELECT destination, fingerprint, state, headers ->> 'X-QueueBox-Replay-Count' AS replays, count(*)::int AS n
         FROM queuebox_outbox GROUP BY 1, 2, 3, 4 ORDER BY 1, 2`,
      ),
      [
        { destination: 'billing', fingerprint: REFUSED, state: 'dead', replays: null, n: 7 },
        { destination: 'billing', fingerprint: TIMEOUT, state: 'pending', replays: '1', n: 2500 },
        { destination: 'shipping', fingerprint: TIMEOUT, state: 'dead', replays: null, n: 5 },
      ],
      'every row of the group replayed exactly once; the other groups untouched',
    );
  });

  it('a replay racing a discard of the same group: each row is replayed or discarded, never both', async () => {
    await dead('billing', TIMEOUT, 2500);
    const group = { component: 'outbox' as const, name: 'billing', fingerprint: TIMEOUT };
    const [replayed, discarded] = await Promise.all([a.replayDeadLetters(group), b.discardDeadLetters(group)]);
    assert.equal(replayed + discarded, 2500, `replayed ${replayed}, discarded ${discarded}`);
    assert.deepEqual(
      await db.query('SELECT state, count(*)::int AS n FROM queuebox_outbox GROUP BY 1'),
      replayed ? [{ state: 'pending', n: replayed }] : [],
    );
  });

  it('acts on the fingerprint a row has when the statement locks it: a row changed meanwhile is left alone', async () => {
    await dead('billing', TIMEOUT, 10);
    const [{ id }] = await db.query<{ id: string }>('SELECT id::text FROM queuebox_outbox ORDER BY id LIMIT 1');
    const other = new Client({ connectionString: db.url });
    await other.connect();
    try {
      // Another writer holds the row and gives it another fingerprint (a replica that replayed it
      // and saw it die again of something else); the replay waits for its lock, then re-checks.
      await other.query('BEGIN');
      await other.query('UPDATE queuebox_outbox SET fingerprint = $2 WHERE id = $1', [id, REFUSED]);
      const replay = a.replayDeadLetters({ component: 'outbox', name: 'billing', fingerprint: TIMEOUT });
      await new Promise((resolve) => setTimeout(resolve, 200));
      await other.query('COMMIT');
      assert.equal(await replay, 9);
    } finally {
      await other.end();
    }
    assert.deepEqual(await db.query('SELECT state, fingerprint FROM queuebox_outbox WHERE id = $1', [id]), [
      { state: 'dead', fingerprint: REFUSED },
    ]);
  });

  it('queuebox dead-letters groups prints them; replay --name --fingerprint replays one group', async () => {
    await dead('billing', TIMEOUT, 3);
    await dead('billing', REFUSED, 1);
    const groups = await queuebox(['dead-letters', 'groups', '--component', 'outbox'], db.url);
    assert.equal(groups.code, 0, groups.stderr);
    assert.match(
      groups.stdout,
      /Dead outbox rows by cause, the biggest groups first:\n {2}count {2}first died {12}last died {13}destination\n {6}3 {2}\S+ {2}\S+ {2}billing\n {4}fingerprint: PublishError\/503: HTTP # from billing for order #\n {6}1 /,
    );
    assert.match(groups.stdout, /2 group\(s\)\. Replay or discard one: /);
    const json = JSON.parse((await queuebox(['dead-letters', 'groups', '--component', 'outbox', '--json'], db.url)).stdout) as {
      groups: { fingerprint: string; count: number }[];
    };
    assert.deepEqual(
      json.groups.map((g) => [g.fingerprint, g.count]),
      [
        [TIMEOUT, 3],
        [REFUSED, 1],
      ],
    );
    const replay = await queuebox(
      ['dead-letters', 'replay', '--component', 'outbox', '--name', 'billing', '--fingerprint', TIMEOUT],
      db.url,
    );
    assert.equal(replay.code, 0, replay.stderr);
    assert.match(replay.stdout, /Replayed 3 dead outbox row\(s\)/);
    const misuse = await queuebox(['dead-letters', 'groups', '--component', 'outbox', '--name', 'billing'], db.url);
    assert.equal(misuse.code, 2);
    assert.match(misuse.stderr, /--name applies to list, count, replay and discard only/);
  });

  it('refuses a fingerprint longer than a row can hold, naming the field', async () => {
    await assert.rejects(a.replayDeadLetters({ component: 'outbox', fingerprint: 'x'.repeat(513) }), (error: unknown) => {
      assert.equal((error as { field?: string }).field, 'fingerprint');
      return true;
    });
  });
});
