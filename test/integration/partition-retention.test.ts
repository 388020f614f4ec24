import assert from 'node:assert/strict';
import { it } from 'node:test';
import { Client } from 'pg';
import { PartitionRetention } from '../../lib/dialects/postgres/partition-retention';
import type { PartitionUpkeep } from '../../lib/dialects/postgres/partition-upkeep';
import { describeWithDatabase, eventually } from '../support/database';
import {
  attachedPartitions,
  createPartitionedTable,
  insertRows,
  openInsert,
  PARTITIONED_TABLE,
  partitionFixture,
  partitionRows,
  runUpkeepUntil,
  runWithin,
  untilWaitingForLock,
} from '../support/partitioned-table';

// Issue 37's retention by dropping partitions (docs/partitioning.md, decision 5), on a real
// PostgreSQL: only settled partitions past their age are dropped, by DETACH ... CONCURRENTLY and
// DROP; a partition that may still receive a row, or holds one unfinished, is never dropped.

const WEEK = { finishedAfterMs: 7 * 86_400_000, deadAfterMs: false as const };

describeWithDatabase('partition retention on PostgreSQL', (db) => {
  const { sql, log, upkeep } = partitionFixture(db);
  const retention = () => new PartitionRetention(sql, { table: PARTITIONED_TABLE, kind: 'outbox', logger: log });

  /** Marks rows [from, to] sent `daysAgo` days ago. */
  const sendRows = (from: number, to: number, daysAgo: number) =>
    db.query(`UPDATE p_outbox SET state = 'sent', sent_at = now() - make_interval(days => $3), attempts = 1 WHERE id BETWEEN $1 AND $2`, [
      from,
      to,
      daysAgo,
    ]);

  /** p1 [1, 1001) and p2 [1001, 2001) full, rows in p3: p1 and p2 can be sealed. */
  const fill = async (keeper: PartitionUpkeep) => {
    await createPartitionedTable(db);
    await keeper.runOnce(); // p1, p2
    await insertRows(db, 1_500);
    await keeper.runOnce(); // p3, p4
    await insertRows(db, 1_000);
  };

  it('drops the settled partitions past the retention age, oldest first, and stops at the first that is not', async () => {
    const keeper = upkeep();
    await fill(keeper);
    await sendRows(1, 1000, 8); // p1: all sent 8 days ago
    await sendRows(1001, 2000, 1); // p2: all sent yesterday
    await runUpkeepUntil(db, keeper, 'p_outbox_p1');
    await runUpkeepUntil(db, keeper, 'p_outbox_p2');

    const run = await retention().runOnce(WEEK);
    assert.deepEqual(run, { dropped: ['p_outbox_p1'], reattached: [] });
    const left = (await partitionRows(db)).map((p) => p.name);
    assert.equal(left[0], 'p_outbox_p2', `p1 gone, p2 first: ${left}`);
    assert.ok(!left.includes('p_outbox_p1'));
    assert.equal((await db.query("SELECT to_regclass('p_outbox_p1') AS t"))[0].t, null, 'the table is gone');
    assert.equal((await attachedPartitions(db)).length, left.length, 'every partition left is attached');
    assert.equal((await db.query<{ n: number }>('SELECT count(*)::int AS n FROM p_outbox'))[0].n, 1_500, 'p2 and p3 keep their rows');

    // With an age of an hour, p2 (sent yesterday) goes too.
    assert.deepEqual(await retention().runOnce({ ...WEEK, finishedAfterMs: 3_600_000 }), { dropped: ['p_outbox_p2'], reattached: [] });
  });

  it('keeps a partition that holds a dead row while dead rows are kept, and drops it once deadAfterMs has passed', async () => {
    const keeper = upkeep();
    await fill(keeper);
    await sendRows(1, 1000, 8);
    await db.query("UPDATE p_outbox SET state = 'dead', sent_at = NULL, claimed_at = now() - interval '3 days' WHERE id = 7");
    await runUpkeepUntil(db, keeper, 'p_outbox_p1');
    assert.deepEqual(await retention().runOnce(WEEK), { dropped: [], reattached: [] }, 'dead rows kept: p1 stays');
    assert.deepEqual(
      await retention().runOnce({ ...WEEK, deadAfterMs: 4 * 86_400_000 }),
      { dropped: [], reattached: [] },
      'dead 3 days, kept 4',
    );
    assert.deepEqual(await retention().runOnce({ ...WEEK, deadAfterMs: 2 * 86_400_000 }), { dropped: ['p_outbox_p1'], reattached: [] });
  });

  it('never drops a partition a transaction inserted into long ago and has not committed: held open across the retention step', async () => {
    const keeper = upkeep();
    await createPartitionedTable(db);
    await keeper.runOnce(); // p1, p2
    const producer = await openInsert(db);
    try {
      assert.equal(producer.id, '1');
      await insertRows(db, 1_500); // the rest of p1 and half of p2
      await keeper.runOnce();
      await insertRows(db, 1_000);
      await sendRows(1, 1000, 8); // every row of p1 the others can see
      for (let run = 0; run < 3; run++) await keeper.runOnce();
      assert.deepEqual(await retention().runOnce(WEEK), { dropped: [], reattached: [] }, 'p1 is not settled: nothing dropped');

      // Even if p1 were settled by mistake (the upkeep's horizon is what keeps it from that), the
      // detach waits for the open transaction and the check after it finds the row.
      await db.query("UPDATE p_outbox_partitions SET settled_at = now() WHERE name = 'p_outbox_p1'");
      const running = retention().runOnce(WEEK);
      await untilWaitingForLock(db, 'the detach waiting for the open transaction', ['ALTER TABLE%DETACH PARTITION%']);
      // Meanwhile producers and claims go on: the detach holds nothing they wait for.
      await runWithin(db, 3_000, [
        "INSERT INTO p_outbox (message_id, destination, payload) VALUES (gen_random_uuid(), 'd', '{}')",
        "UPDATE p_outbox SET state = 'processing', claim_token = gen_random_uuid() WHERE id = 1600",
      ]);
      await producer.commit();
      assert.deepEqual(await running, { dropped: [], reattached: ['p_outbox_p1'] });
      assert.ok(
        log.lines.some(
          (line) =>
            line.level === 'warn' && line.message.includes('holds a pending or processing row') && line.message.includes('"p_outbox_p1"'),
        ),
        'the reattach is warned of',
      );
    } finally {
      await producer.end();
    }
    const [row] = await db.query<{ state: string }>('SELECT state FROM p_outbox WHERE id = 1');
    assert.equal(row?.state, 'pending', "the late transaction's row is in the outbox, claimable");
    assert.ok(
      (await attachedPartitions(db)).some((p) => p.startsWith('p_outbox_p1 ')),
      'p1 is attached again',
    );
    assert.equal(
      (await partitionRows(db)).find((p) => p.name === 'p_outbox_p1')?.settled,
      false,
      'and unsettled: claims look into it again',
    );
  });

  it('finishes a DETACH ... CONCURRENTLY that stopped half way (cancelled while it waited) without locking the parent, then drops the partition', async () => {
    const keeper = upkeep();
    await fill(keeper);
    await sendRows(1, 1000, 8);
    await runUpkeepUntil(db, keeper, 'p_outbox_p1');
    const reader = new Client({ connectionString: db.url });
    const detacher = new Client({ connectionString: db.url });
    await Promise.all([reader.connect(), detacher.connect()]);
    try {
      await reader.query('BEGIN');
      await reader.query('SELECT count(*) FROM p_outbox');
      const [{ pid }] = (await detacher.query('SELECT pg_backend_pid() AS pid')).rows;
      const detach = detacher.query('ALTER TABLE p_outbox DETACH PARTITION p_outbox_p1 CONCURRENTLY').then(
        () => 'detached',
        (error: Error) => error.message,
      );
      await eventually(
        async () =>
          (await db.query<{ w: string | null }>('SELECT wait_event_type AS w FROM pg_stat_activity WHERE pid = $1', [pid]))[0]?.w ===
          'Lock',
        'the detach waiting for the reader',
      );
      await db.query('SELECT pg_cancel_backend($1)', [pid]);
      assert.match(await detach, /cancel/);
      const [pending] = await db.query<{ pending: boolean }>(
        "SELECT inhdetachpending AS pending FROM pg_inherits WHERE inhrelid = 'p_outbox_p1'::regclass",
      );
      assert.equal(pending?.pending, true, 'left detach pending');

      // The run finishes the detach (FINALIZE waits for the reader, as the detach did) without
      // locking the parent: a DROP TABLE of the half-detached partition would take ACCESS
      // EXCLUSIVE on it and stop every insert behind the reader.
      const running = retention().runOnce(WEEK);
      await untilWaitingForLock(db, 'retention waiting for the reader', ['ALTER TABLE%', 'DROP TABLE%']);
      await runWithin(db, 3_000);
      await reader.query('COMMIT');
      assert.deepEqual(await running, { dropped: ['p_outbox_p1'], reattached: [] });
    } finally {
      await Promise.all([reader.end(), detacher.end()]);
    }
    assert.equal((await db.query("SELECT to_regclass('p_outbox_p1') AS t"))[0].t, null);
  });
});
