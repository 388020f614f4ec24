import assert from 'node:assert/strict';
import { it } from 'node:test';
import type { PartitionUpkeep } from '../../lib/dialects/postgres/partition-upkeep';
import { describeWithDatabase } from '../support/database';
import {
  attachedPartitions,
  createPartitionedTable,
  insertRows,
  openInsert,
  partitionFixture,
  partitionRows,
  runUpkeepUntil,
} from '../support/partitioned-table';

// Issue 37's upkeep of a table partitioned by id range (docs/partitioning.md), on a real
// PostgreSQL: partitions created ahead of the ids handed out, and settled only once no insert can
// reach them and none of their rows is unfinished. The partitioned table is the outbox's columns
// and indexes partitioned by id (test/support/partitioned-table.ts), until the layout's migration.

describeWithDatabase('partition upkeep on PostgreSQL', (db) => {
  const { log, upkeep } = partitionFixture(db);
  const createTable = () => createPartitionedTable(db);
  const partitions = () => partitionRows(db);
  const attached = () => attachedPartitions(db);
  const insert = (count: number) => insertRows(db, count);
  const runUntilSettled = (keeper: PartitionUpkeep, name: string, settled = true) => runUpkeepUntil(db, keeper, name, settled);

  /** Hands out ids up to `id` without rows (a producer's traffic, for the rate). */
  const useIdsThrough = (id: number) => db.query("SELECT setval(pg_get_serial_sequence('p_outbox', 'id'), $1)", [id]);

  const lastId = async () =>
    BigInt((await db.query<{ id: string }>("SELECT last_value::text AS id FROM pg_sequences WHERE sequencename LIKE 'p_outbox%'"))[0].id);

  it('creates two partitions ahead on an empty table, attached without a DEFAULT partition, and keeps two ahead as ids are used', async () => {
    await createTable();
    const keeper = upkeep();
    const first = await keeper.runOnce();
    assert.deepEqual(first.created, ['p_outbox_p1', 'p_outbox_p2']);
    assert.deepEqual(await attached(), [
      "p_outbox_p1 FOR VALUES FROM ('1') TO ('1001')",
      "p_outbox_p2 FOR VALUES FROM ('1001') TO ('2001')",
    ]);
    assert.deepEqual(
      (await partitions()).map((p) => [p.name, p.from_id, p.to_id, p.settled]),
      [
        ['p_outbox_p1', '1', '1001', false],
        ['p_outbox_p2', '1001', '2001', false],
      ],
    );
    // Each partition holds its own unique index of keys in flight (I4's net within it).
    const local = await db.query<{ indexdef: string }>(
      "SELECT indexdef FROM pg_indexes WHERE tablename = 'p_outbox_p1' AND indexdef LIKE 'CREATE UNIQUE%(key)%'",
    );
    assert.equal(local.length, 1, 'p_outbox_p1 has its unique index of keys in flight');

    await insert(1_500); // into p1 and p2
    const second = await keeper.runOnce();
    assert.deepEqual(second.created, ['p_outbox_p3', 'p_outbox_p4'], 'two whole partitions above the last id again');
    await insert(2_400); // reaches p4
    assert.equal((await db.query<{ n: number }>('SELECT count(*)::int AS n FROM p_outbox'))[0].n, 3_900);
  });

  it('sizes new partitions by the highest rate seen between two runs: intervalMs of traffic each, aheadMs of it ahead', async () => {
    await createTable();
    let now = 1_000_000;
    const keeper = upkeep({ now: () => now, intervalMs: 10_000, aheadMs: 60_000, minSpan: 1_000 });
    await keeper.runOnce(); // p1, p2: minSpan each (no rate yet)
    await useIdsThrough(4_000);
    now += 10_000; // 4,000 ids in 10 s: 0.4 an ms
    const run = await keeper.runOnce();
    assert.equal(keeper.idsPerMs(), 0.4);
    const rows = await partitions();
    const created = rows.filter((p) => run.created.includes(p.name));
    assert.ok(created.length > 0);
    for (const p of created) assert.equal(BigInt(p.to_id) - BigInt(p.from_id), 4_000n, `${p.name} spans intervalMs (10 s) at 0.4 ids a ms`);
    const ahead = BigInt(rows.at(-1)?.to_id ?? 0) - 1n - (await lastId());
    assert.ok(ahead >= 24_000n, `${ahead} ids ahead: at least aheadMs (60 s) at 0.4 ids a ms`);
    // The ranges now cross a digit (6001, then 10001 and on): the next run finds the newest
    // partition by its number, not by its digits' order, and has nothing to add.
    assert.deepEqual((await keeper.runOnce()).created, [], 'enough ahead already');
  });

  it('a clock stepped back, or a week forward, moves no range and fails no insert: only the rate reads the clock', async () => {
    await createTable();
    let now = 10_000_000;
    const keeper = upkeep({ now: () => now, intervalMs: 10_000, aheadMs: 60_000, minSpan: 1_000 });
    await keeper.runOnce();
    await useIdsThrough(1_500);
    now += 1_500; // shorter than RATE_WINDOW_MS: counted over it
    await keeper.runOnce();
    assert.equal(keeper.idsPerMs(), 0.15, '1,500 ids counted over 10 s');
    const before = await partitions();
    now -= 3_600_000; // the clock steps back an hour
    await insert(500);
    await keeper.runOnce();
    assert.equal(keeper.idsPerMs(), 0.15, 'a sample older than its predecessor gives no rate');
    now += 7 * 86_400_000; // a week later (the application was stopped)
    await insert(500);
    await keeper.runOnce();
    const afterRows = await partitions();
    assert.deepEqual(
      afterRows.slice(0, before.length).map((p) => [p.name, p.from_id, p.to_id]),
      before.map((p) => [p.name, p.from_id, p.to_id]),
      'no partition changed its range',
    );
    const last = await lastId();
    assert.ok(afterRows.filter((p) => BigInt(p.from_id) > last).length >= 2, 'two whole partitions ahead of the last id');
    await insert(5_000); // still room: the partitions ahead were made for the highest rate seen
  });

  it('covers ids handed out past the last partition (inserts that failed for want of one) with one partition, and keeps two ahead of them', async () => {
    await createTable();
    const keeper = upkeep(); // partitions of 1,000 ids
    await keeper.runOnce(); // [1, 1001) and [1001, 2001)
    await useIdsThrough(50_000); // failed inserts burn ids too
    await assert.rejects(insert(1), /no partition of relation/, 'no partition holds the next id yet');
    const run = await keeper.runOnce();
    assert.deepEqual(run.created, ['p_outbox_p3', 'p_outbox_p4', 'p_outbox_p5'], `created: ${run.created}`);
    assert.deepEqual(
      (await partitions()).slice(2).map((p) => [p.name, p.from_id, p.to_id]),
      [
        ['p_outbox_p3', '2001', '50002'],
        ['p_outbox_p4', '50002', '51002'],
        ['p_outbox_p5', '51002', '52002'],
      ],
      'one partition over the ids burnt, then two of 1,000 ahead',
    );
    await insert(1_500);
  });
  it('settles a partition only once no insert can reach it: an open transaction that took one of its ids keeps it unsettled', async () => {
    await createTable();
    const keeper = upkeep({ minSpan: 1_000 });
    await keeper.runOnce(); // p1 [1, 1001), p2 [1001, 2001)
    const producer = await openInsert(db);
    try {
      assert.equal(producer.id, '1', 'the open transaction holds the first id of p1');
      await insert(999); // the rest of p1, committed
      await insert(900); // into p2
      await db.query("UPDATE p_outbox SET state = 'sent', sent_at = now() WHERE id < 1001");
      for (let run = 0; run < 3; run++) {
        const result = await keeper.runOnce();
        assert.deepEqual(result.settled, [], `run ${run}: p1 is not settled while a transaction that took one of its ids is open`);
      }
      assert.equal(await keeper.lowMark(), 1n);
      await producer.commit();
    } finally {
      await producer.end();
    }
    // Its row is pending now: p1 holds an unfinished row.
    assert.deepEqual((await keeper.runOnce()).settled, []);
    assert.deepEqual((await keeper.runOnce()).settled, []);
    assert.deepEqual(
      (await partitions()).filter((p) => p.settled),
      [],
      'nothing settled while p1 holds a pending row',
    );
    await db.query("UPDATE p_outbox SET state = 'sent', sent_at = now() WHERE id = 1");
    await runUntilSettled(keeper, 'p_outbox_p1');
    assert.deepEqual(
      (await partitions()).filter((p) => p.settled).map((p) => p.name),
      ['p_outbox_p1'],
      'p2 holds pending rows',
    );
    assert.equal(await keeper.lowMark(), 1001n, 'claims start at p2');
  });

  it('unsettles a settled partition that holds an unfinished row again, and the low mark comes back down', async () => {
    await createTable();
    const keeper = upkeep({ minSpan: 1_000 });
    await keeper.runOnce();
    await insert(1_200);
    await db.query("UPDATE p_outbox SET state = 'sent', sent_at = now() WHERE id < 1001");
    await runUntilSettled(keeper, 'p_outbox_p1');
    assert.deepEqual(
      (await partitions()).filter((p) => p.settled).map((p) => p.name),
      ['p_outbox_p1'],
    );
    await db.query("UPDATE p_outbox SET state = 'pending', sent_at = NULL WHERE id = 500"); // a row made pending without unsettling
    const warned = log.lines.length;
    const run = await keeper.runOnce();
    assert.deepEqual(run.unsettled, ['p_outbox_p1']);
    assert.deepEqual(
      log.lines
        .slice(warned)
        .filter((line) => line.level === 'warn')
        .map((line) => line.message.slice(0, 49)),
      ['Partition "p_outbox_p1" of "p_outbox" was settled'],
    );
    assert.equal(await keeper.lowMark(), 1n);
  });

  it('two replicas keeping the same table at once: one creates, the other skips, no range overlaps', async () => {
    await createTable();
    const [one, two] = await Promise.all([upkeep().runOnce(), upkeep().runOnce()]);
    assert.equal(one.created.length + two.created.length, 2, `created ${[...one.created, ...two.created]}`);
    await Promise.all([upkeep().runOnce(), upkeep().runOnce()]);
    const rows = await partitions();
    for (let i = 1; i < rows.length; i++) assert.equal(rows[i].from_id, rows[i - 1].to_id, 'contiguous ranges');
    assert.equal((await attached()).length, rows.length);
  });
});
