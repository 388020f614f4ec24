import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { QUEUEBOX_RESOLVED_OPTIONS } from '../../lib/common/queuebox.constants';
import { inboxPullClaimSql, inboxRelayClaimSql, outboxClaimSql } from '../../lib/dialects/postgres/claims.sql';
import { inboxCompleteFollowersSql } from '../../lib/dialects/postgres/followers.sql';
import { QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import {
  createQueueBoxClaimsMigration,
  createQueueBoxMigration,
  createQueueBoxMigrations,
  createQueueBoxOperationsMigration,
} from '../../lib/migrations/queuebox.migration';
import { renderSchemaFiles } from '../../lib/migrations/schema-files';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import type { ResolvedQueueBoxOptions } from '../../lib/options/options.resolved';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { createTestApp } from '../support/app';
import { claimsOf } from '../support/claims';
import { createTestDatabase, eventually, runMigrations, type TestDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

const ROOT = join(__dirname, '..', '..', '..');

describe('schema', () => {
  const databases: TestDatabase[] = [];
  after(async () => {
    await Promise.all(databases.map((db) => db.drop()));
  });
  const newDatabase = async (options?: Parameters<typeof createTestDatabase>[0]) => {
    const db = await createTestDatabase(options);
    databases.push(db);
    return db;
  };

  it('the shipped plain-SQL files match the migration statements', () => {
    for (const file of renderSchemaFiles()) {
      const shipped = readFileSync(join(ROOT, file.dir, file.name), 'utf8');
      assert.equal(shipped, file.content, `${file.dir}/${file.name} is stale: run \`npm run sql\``);
    }
  });

  it('the plain SQL creates a working schema', async () => {
    const db = await newDatabase({ migrate: false });
    await db.query(readFileSync(join(ROOT, 'sql/postgres/001_queuebox.up.sql'), 'utf8'));
    await db.query(readFileSync(join(ROOT, 'sql/postgres/002_queuebox_operations.up.sql'), 'utf8'));
    await db.query(readFileSync(join(ROOT, 'sql/postgres/003_queuebox_claims.up.sql'), 'utf8'));
    await db.query(readFileSync(join(ROOT, 'sql/postgres/004_queuebox_key_collation.up.sql'), 'utf8'));
    await db.query(readFileSync(join(ROOT, 'sql/postgres/005_queuebox_claim_functions.up.sql'), 'utf8'));
    await db.query(readFileSync(join(ROOT, 'sql/postgres/006_queuebox_instances.up.sql'), 'utf8'));
    await db.query(readFileSync(join(ROOT, 'sql/postgres/007_queuebox_claim_probes.up.sql'), 'utf8'));
    await db.query(readFileSync(join(ROOT, 'sql/postgres/009_queuebox_renewals.up.sql'), 'utf8'));
    assert.equal((await db.query("SELECT indexname FROM pg_indexes WHERE indexname LIKE '%\\_sent\\_idx'")).length, 1);
    assert.equal((await db.query("SELECT indexname FROM pg_indexes WHERE indexname LIKE '%\\_unkeyed\\_claim\\_idx'")).length, 2);
    const publisher = new RecordingPublisher();
    const t = await createTestApp(db.url, { outbox: { publisher }, workers: false });
    try {
      const dataSource = t.app.get<DataSource>(getDataSourceToken());
      await dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'd', payload: 1 }));
      assert.equal(await t.get(OutboxPoller).runOnce(), 1);
    } finally {
      await t.app.close();
    }
    await db.query(readFileSync(join(ROOT, 'sql/postgres/009_queuebox_renewals.down.sql'), 'utf8'));
    assert.deepEqual(await db.query("SELECT column_name FROM information_schema.columns WHERE column_name IN ('renewed_at', 'beats')"), []);
    await db.query(readFileSync(join(ROOT, 'sql/postgres/007_queuebox_claim_probes.down.sql'), 'utf8'));
    await db.query(readFileSync(join(ROOT, 'sql/postgres/006_queuebox_instances.down.sql'), 'utf8'));
    assert.deepEqual(await db.query("SELECT proname FROM pg_proc WHERE proname LIKE 'queuebox%claim'"), [], 'the claim functions went');
    await db.query(readFileSync(join(ROOT, 'sql/postgres/005_queuebox_claim_functions.down.sql'), 'utf8'));
    await db.query(readFileSync(join(ROOT, 'sql/postgres/004_queuebox_key_collation.down.sql'), 'utf8'));
    await db.query(readFileSync(join(ROOT, 'sql/postgres/003_queuebox_claims.down.sql'), 'utf8'));
    assert.deepEqual(await db.query("SELECT indexname FROM pg_indexes WHERE indexname LIKE '%\\_unkeyed\\_claim\\_idx'"), []);
    await db.query(readFileSync(join(ROOT, 'sql/postgres/002_queuebox_operations.down.sql'), 'utf8'));
    assert.deepEqual(await db.query("SELECT indexname FROM pg_indexes WHERE indexname LIKE '%\\_dead\\_idx'"), []);
    await db.query(readFileSync(join(ROOT, 'sql/postgres/001_queuebox.down.sql'), 'utf8'));
    assert.deepEqual(await db.query("SELECT tablename FROM pg_tables WHERE tablename LIKE 'queuebox%'"), []);
  });

  it('schema-qualified table names work end to end, through the migration class', async () => {
    const tables = { outbox: 'messaging.events_out', inbox: 'messaging.events_in' };
    const db = await newDatabase({ tables });
    const publisher = new RecordingPublisher();
    const t = await createTestApp(db.url, { tables, outbox: { publisher }, workers: false });
    try {
      const dataSource = t.app.get<DataSource>(getDataSourceToken());
      await dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'd', key: 'k', payload: 1 }));
      assert.equal(await t.get(OutboxPoller).runOnce(), 1);
      assert.deepEqual(await db.query('SELECT state FROM messaging.events_out'), [{ state: 'sent' }]);
    } finally {
      await t.app.close();
    }
    const migration = new (createQueueBoxMigration({ tables }))();
    const client = new Client({ connectionString: db.url });
    await client.connect();
    try {
      const tablesInSchema = await client.query("SELECT tablename FROM pg_tables WHERE schemaname = 'messaging' ORDER BY 1");
      assert.deepEqual(
        tablesInSchema.rows.map((r) => r.tablename),
        ['events_in', 'events_out', 'events_out_rate_limits', 'queuebox_instances'],
        'the instances table beside the outbox, in its schema',
      );
      assert.equal(migration.name, 'QueueBoxSchema1764460800000');
      // Migration 002 on schema-qualified names: its indexes exist, and its down drops them by their qualified names.
      const indexes = async () =>
        (
          await client.query(
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'messaging' AND indexname ~ '_(sent|processed|dead)_idx$' ORDER BY 1",
          )
        ).rows.map((r) => r.indexname);
      assert.deepEqual(await indexes(), ['events_in_dead_idx', 'events_in_processed_idx', 'events_out_dead_idx', 'events_out_sent_idx']);
      const operations = new (createQueueBoxOperationsMigration({ tables }))();
      assert.equal(operations.name, 'QueueBoxOperations1764633600000');
      await operations.down({ connection: { options: { type: 'postgres' } }, query: (sql: string) => client.query(sql) } as never);
      assert.deepEqual(await indexes(), []);
      // Migration 003 likewise.
      const claimsIndexes = async () =>
        (
          await client.query(
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'messaging' AND indexname ~ '_unkeyed_claim_idx$' ORDER BY 1",
          )
        ).rows.map((r) => r.indexname);
      assert.deepEqual(await claimsIndexes(), ['events_in_unkeyed_claim_idx', 'events_out_unkeyed_claim_idx']);
      const claims = new (createQueueBoxClaimsMigration({ tables }))();
      assert.equal(claims.name, 'QueueBoxClaims1795996800000');
      await claims.down({ connection: { options: { type: 'postgres' } }, query: (sql: string) => client.query(sql) } as never);
      assert.deepEqual(await claimsIndexes(), []);
    } finally {
      await client.end();
    }
  });

  it('start-up fails with a clear error when the tables were never created', async () => {
    const db = await newDatabase({ migrate: false });
    await assert.rejects(
      createTestApp(db.url, { workers: false }),
      (error: unknown) => error instanceof QueueBoxConfigError && /queuebox_outbox" does not exist/.test(error.message),
    );
  });

  it('start-up fails with a clear error when the named DataSource does not exist', async () => {
    const db = await newDatabase();
    await assert.rejects(
      createTestApp(db.url, { workers: false, dataSource: 'reporting' }),
      (error: unknown) => error instanceof QueueBoxConfigError && /no TypeORM DataSource named "reporting"/.test(error.message),
    );
  });

  it('works on a named DataSource', async () => {
    const db = await newDatabase();
    const t = await createTestApp(db.url, { workers: false, dataSource: 'orders' }, { typeormName: 'orders' });
    try {
      const dataSource = t.app.get<DataSource>(getDataSourceToken('orders'));
      await dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'd', payload: 1 }));
      assert.equal((await db.query('SELECT count(*)::int AS n FROM queuebox_outbox'))[0].n, 1);
    } finally {
      await t.app.close();
    }
  });

  it('forRootAsync takes its options from an injected factory', async () => {
    const db = await newDatabase();
    const publisher = new RecordingPublisher();
    const CONFIG = 'TEST:CONFIG';
    @Module({ providers: [{ provide: CONFIG, useValue: { batchSize: 7 } }], exports: [CONFIG] })
    class ConfigModule {}
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, logging: false }),
        QueueBoxModule.forRootAsync({
          imports: [ConfigModule],
          inject: [CONFIG],
          useFactory: (config: { batchSize: number }) => ({ outbox: { publisher, batchSize: config.batchSize } }),
        }),
      ],
    })
    class AsyncModule {}
    const app = await NestFactory.createApplicationContext(AsyncModule, { logger: false, abortOnError: false });
    try {
      assert.equal(app.get<ResolvedQueueBoxOptions>(QUEUEBOX_RESOLVED_OPTIONS).outbox.batchSize, 7);
      const dataSource = app.get<DataSource>(getDataSourceToken());
      await dataSource.transaction((manager) => app.get(OutboxService).enqueue(manager, { destination: 'd', payload: 1 }));
      await eventually(async () => publisher.calls.length === 1, 'the message to be published');
    } finally {
      await app.close();
    }
  });

  // The search for claimable rows must not grow with finished rows. (Writing the claimed rows
  // touches a few more pages in a bigger table: B-tree depth of the primary key and message_id
  // index grows with log n, as in any table.)
  it('finding rows to claim reads about as many pages with 1,000,000 sent rows in the table as with none', async () => {
    const db = await newDatabase();
    const client = new Client({ connectionString: db.url });
    await client.connect();
    const pagesPerClaim = async () => {
      await client.query('BEGIN');
      try {
        const { rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${outboxClaimSql('"queuebox_outbox"')}`, [
          10,
          60_000,
          null,
        ]);
        const plan = rows[0]['QUERY PLAN'][0].Plan;
        const candidates = findNode(plan, (node) => node['Subplan Name'] === 'CTE candidates');
        assert.ok(candidates, 'the claim plan has its candidates CTE');
        return { pages: searchPages(plan), claimed: candidates['Actual Rows'] as number };
      } finally {
        await client.query('ROLLBACK');
      }
    };
    try {
      await client.query(`INSERT INTO queuebox_outbox (message_id, destination, "key", payload)
        SELECT gen_random_uuid(), 'd', 'key-' || (n % 20), '{}' FROM generate_series(1, 40) n`);
      await client.query('VACUUM ANALYZE queuebox_outbox');
      const small = await pagesPerClaim();
      await client.query(`INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, sent_at)
        SELECT gen_random_uuid(), 'd', 'key-' || (n % 1000), '{"n": 1}', 'sent', 1, now() FROM generate_series(1, 1000000) n`);
      await client.query('VACUUM ANALYZE queuebox_outbox');
      const large = await pagesPerClaim();
      assert.equal(small.claimed, 10);
      assert.equal(large.claimed, 10);
      // A few dozen pages either way, whatever the plan (a 40-row table is read by sequential scans
      // of its one page; a large one through the partial indexes, with the in-flight check either
      // hashed once or probed per row, 1 or 20 pages of an empty index). A search that read the
      // sent rows would read thousands.
      assert.ok(large.pages <= small.pages * 3, `pages read to find 10 rows: ${small.pages} with 40 rows, ${large.pages} with 1,000,040`);
    } finally {
      await client.end();
    }
  });

  // The oldest pending rows belong to keys in flight: the claim must reach the claimable rows behind
  // them (rows without a key, heads of free keys) without reading the busy keys' backlog.
  it('a claim behind keys in flight takes the rows behind them without reading the rows waiting on them (20,000 against 2,000)', async () => {
    const db = await newDatabase();
    const client = new Client({ connectionString: db.url });
    await client.connect();
    const claimBehindBusyKeys = async (waiting: number) => {
      await client.query('TRUNCATE queuebox_outbox');
      // 20 busy keys: a head in flight and `waiting` rows behind them, all older than what follows.
      await client.query(
        `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, available_at)
         SELECT gen_random_uuid(), 'd', 'busy-' || (n % 20), '{}', now() - interval '1 hour' + n * interval '1 ms' FROM generate_series(1, $1::int) n`,
        [waiting + 20],
      );
      await client.query(`UPDATE queuebox_outbox SET state = 'processing', claim_token = gen_random_uuid(), attempts = 1,
        lease_expires_at = now() + interval '1 hour' WHERE id IN (SELECT min(id) FROM queuebox_outbox GROUP BY "key")`);
      // Behind them: 4 rows without a key and the heads of 4 free keys (each with a second row).
      await client.query(`INSERT INTO queuebox_outbox (message_id, destination, "key", payload)
        SELECT gen_random_uuid(), 'd', NULL, '{}' FROM generate_series(1, 4)`);
      await client.query(`INSERT INTO queuebox_outbox (message_id, destination, "key", payload)
        SELECT gen_random_uuid(), 'd', 'free-' || (n % 4), '{}' FROM generate_series(0, 7) n ORDER BY n`);
      await client.query('ANALYZE queuebox_outbox');
      await client.query('BEGIN');
      try {
        const { rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${outboxClaimSql('"queuebox_outbox"')}`, [
          10,
          60_000,
          null,
        ]);
        // Everything the claim read to find and lock its rows (its search CTEs run inside this one).
        const candidates = findNode(rows[0]['QUERY PLAN'][0].Plan, (node) => node['Subplan Name'] === 'CTE candidates');
        assert.ok(candidates, 'the claim plan has its candidates CTE');
        const pages = candidates['Shared Hit Blocks'] + candidates['Shared Read Blocks'];
        const claimed = await client.query(
          `SELECT coalesce("key", 'none') AS "key" FROM queuebox_outbox WHERE state = 'processing' AND "key" IS DISTINCT FROM 'busy' AND "key" NOT LIKE 'busy-%' OR state = 'processing' AND "key" IS NULL`,
        );
        return { pages, claimed: claimed.rows.map((r) => r.key).sort() };
      } finally {
        await client.query('ROLLBACK');
      }
    };
    try {
      const small = await claimBehindBusyKeys(2_000);
      const large = await claimBehindBusyKeys(20_000);
      const expected = ['free-0', 'free-1', 'free-2', 'free-3', 'none', 'none', 'none', 'none'];
      assert.deepEqual(small.claimed, expected, 'the 4 rows without a key and the 4 free heads, not their second rows');
      assert.deepEqual(large.claimed, expected);
      // Ten times the rows waiting: a search that read them would read about ten times the pages;
      // a bounded one reads more only by the depth of the indexes it probes (log n).
      assert.ok(large.pages <= small.pages * 3, `pages read: ${small.pages} with 2,000 rows waiting, ${large.pages} with 20,000`);
    } finally {
      await client.end();
    }
  });
  it('relay and pull claims behind aggregates in flight take the rows behind them without reading the rows waiting (20,000 against 2,000)', async () => {
    const db = await newDatabase();
    const client = new Client({ connectionString: db.url });
    await client.connect();
    const claims = {
      relay: [inboxRelayClaimSql('"queuebox_inbox"'), [10, 60_000, ['src'], null]],
      pull: [inboxPullClaimSql('"queuebox_inbox"'), [10, 60_000, 'src', null]],
    } as const;
    const claimBehindBusyAggregates = async (kind: keyof typeof claims, waiting: number) => {
      await client.query('TRUNCATE queuebox_inbox');
      await client.query(
        `INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload, available_at)
         SELECT 'src', 'w' || n, 'busy-' || (n % 20), '{}', now() - interval '1 hour' + n * interval '1 ms' FROM generate_series(1, $1::int) n`,
        [waiting + 20],
      );
      await client.query(`UPDATE queuebox_inbox SET state = 'processing', claim_token = gen_random_uuid(), attempts = 1,
        lease_expires_at = now() + interval '1 hour' WHERE id IN (SELECT min(id) FROM queuebox_inbox GROUP BY aggregate_id)`);
      // Another source's rows must not be taken.
      await client.query(`INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload)
        SELECT 'other', 'o' || n, NULL, '{}' FROM generate_series(1, 3) n`);
      await client.query(`INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload)
        SELECT 'src', 'u' || n, NULL, '{}' FROM generate_series(1, 4) n`);
      await client.query(`INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload)
        SELECT 'src', 'f' || n, 'free-' || (n % 4), '{}' FROM generate_series(0, 7) n ORDER BY n`);
      await client.query('ANALYZE queuebox_inbox');
      const [sql, params] = claims[kind];
      await client.query('BEGIN');
      try {
        const { rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${sql}`, [...params]);
        const candidates = findNode(rows[0]['QUERY PLAN'][0].Plan, (node) => node['Subplan Name'] === 'CTE candidates');
        assert.ok(candidates, 'the claim plan has its candidates CTE');
        const claimed = await client.query(
          `SELECT source || ':' || coalesce(aggregate_id, 'none') AS row FROM queuebox_inbox WHERE state = 'processing' AND (aggregate_id IS NULL OR aggregate_id NOT LIKE 'busy-%')`,
        );
        return {
          pages: candidates['Shared Hit Blocks'] + candidates['Shared Read Blocks'],
          claimed: claimed.rows.map((r) => r.row).sort(),
        };
      } finally {
        await client.query('ROLLBACK');
      }
    };
    try {
      const expected = ['src:free-0', 'src:free-1', 'src:free-2', 'src:free-3', 'src:none', 'src:none', 'src:none', 'src:none'];
      for (const kind of ['relay', 'pull'] as const) {
        const small = await claimBehindBusyAggregates(kind, 2_000);
        const large = await claimBehindBusyAggregates(kind, 20_000);
        assert.deepEqual(small.claimed, expected, `${kind}: the 4 rows without an aggregate and the 4 free heads`);
        assert.deepEqual(large.claimed, expected, kind);
        assert.ok(
          large.pages <= small.pages * 3,
          `${kind}: pages read: ${small.pages} with 2,000 rows waiting, ${large.pages} with 20,000`,
        );
      }
    } finally {
      await client.end();
    }
  });
  // Issue 29: statistics taken while every row was pending (a backlog received, then ANALYZEd, as
  // in a drain) put the processed rows at about none, and a completion that let the planner read
  // the head through the partial index of processed rows read every processed row, on every
  // batch: 80,000 buffers a statement half way through a 200,000-message drain.
  it('completing followers reads about as many pages with 100,000 processed rows in the table as with none, whatever the statistics say', async () => {
    const db = await newDatabase();
    const client = new Client({ connectionString: db.url });
    await client.connect();
    const pagesToComplete = async (processed: number) => {
      await client.query('TRUNCATE queuebox_inbox');
      // 10 aggregates of 20 pending rows each, ANALYZEd while all pending.
      await client.query(`INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload)
        SELECT 'src', 'p' || n, 'agg-' || (n % 10), '{}' FROM generate_series(0, 199) n ORDER BY n`);
      await client.query('ANALYZE queuebox_inbox');
      // Finished rows the statistics do not know of.
      await client.query(
        `INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload, state, attempts, processed_at)
         SELECT 'src', 'd' || n, 'agg-' || (n % 10), '{}', 'processed', 1, now() FROM generate_series(1, $1::int) n`,
        [processed],
      );
      await client.query('BEGIN');
      try {
        // Each aggregate's first row completed as a head under a token; its next 9 rows are its followers.
        const { rows: heads } =
          await client.query(`UPDATE queuebox_inbox SET state = 'processed', claim_token = gen_random_uuid(), attempts = 1
          WHERE id IN (SELECT min(id) FROM queuebox_inbox WHERE state = 'pending' GROUP BY aggregate_id) RETURNING id, aggregate_id, claim_token`);
        const { rows: followers } = await client.query(
          `SELECT f.id, h.id AS head_id, h.token FROM unnest($1::bigint[], $2::text[], $3::uuid[]) AS h(id, aggregate_id, token)
           CROSS JOIN LATERAL (SELECT i.id FROM queuebox_inbox i WHERE i.aggregate_id = h.aggregate_id AND i.state = 'pending' ORDER BY i.id LIMIT 9) f`,
          [heads.map((h) => h.id), heads.map((h) => h.aggregate_id), heads.map((h) => h.claim_token)],
        );
        const { rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${inboxCompleteFollowersSql('"queuebox_inbox"')}`, [
          followers.map((f) => f.id),
          followers.map((f) => f.head_id),
          followers.map((f) => f.token),
        ]);
        // The update's input: the rows found (and their heads checked), before any write.
        const plan = rows[0]['QUERY PLAN'][0].Plan;
        const found = plan.Plans[0];
        return { pages: found['Shared Hit Blocks'] + found['Shared Read Blocks'], completed: plan['Actual Rows'] as number };
      } finally {
        await client.query('ROLLBACK');
      }
    };
    try {
      await client.query('ALTER TABLE queuebox_inbox SET (autovacuum_enabled = false)');
      const small = await pagesToComplete(0);
      const large = await pagesToComplete(100_000);
      assert.equal(small.completed, 90);
      assert.equal(large.completed, 90);
      // Two primary-key lookups per follower either way (a few pages each, the B-tree's depth
      // grows with log n); a plan that read the processed rows would read thousands.
      assert.ok(
        large.pages <= small.pages * 3,
        `pages read to find 90 followers and their heads: ${small.pages} with none processed, ${large.pages} with 100,000`,
      );
    } finally {
      await client.end();
    }
  });
  // Issue 29: statistics taken while every row was pending (a backlog received, then ANALYZEd) and
  // a VACUUM of the drained table (autovacuum can run one on a nearly empty table) turned the
  // head probe `e.id < w.id` from the key index into a walk down the primary key (or the table)
  // past every finished row, once per row looked at: 32 million buffers for one claim after a
  // 200,000-message drain.
  it('a claim of a drained table VACUUMed under the statistics of its backlog reads as many pages as with fresh statistics (50,000 rows, 68 left)', async () => {
    const db = await newDatabase();
    const client = new Client({ connectionString: db.url });
    await client.connect();
    const claims = {
      outbox: { sql: outboxClaimSql('"queuebox_outbox"'), params: [100, 60_000, null], keys: 2 },
      relay: { sql: inboxRelayClaimSql('"queuebox_inbox"'), params: [100, 60_000, ['src'], null], keys: 100 },
      pull: { sql: inboxPullClaimSql('"queuebox_inbox"'), params: [100, 60_000, 'src', null], keys: 100 },
    } as const;
    const pagesToClaim = async (kind: keyof typeof claims) => {
      const { sql, params } = claims[kind];
      await client.query('BEGIN');
      try {
        const { rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${sql}`, [...params]);
        const plan = rows[0]['QUERY PLAN'][0].Plan;
        const candidates = findNode(plan, (node) => node['Subplan Name'] === 'CTE candidates');
        assert.ok(candidates, 'the claim plan has its candidates CTE');
        return { pages: searchPages(plan), claimed: candidates['Actual Rows'] as number };
      } finally {
        await client.query('ROLLBACK');
      }
    };
    try {
      for (const kind of ['outbox', 'relay', 'pull'] as const) {
        const table = kind === 'outbox' ? 'queuebox_outbox' : 'queuebox_inbox';
        const { keys } = claims[kind];
        await client.query(`TRUNCATE ${table}`);
        await client.query(`ALTER TABLE ${table} SET (autovacuum_enabled = false)`);
        await client.query(
          kind === 'outbox'
            ? `INSERT INTO queuebox_outbox (message_id, destination, "key", payload)
               SELECT gen_random_uuid(), 'd', 'key-' || (n % $1::int), '{}' FROM generate_series(1, 50000) n ORDER BY n`
            : `INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload)
               SELECT 'src', 'p' || n, 'agg-' || (n % $1::int), '{}' FROM generate_series(1, 50000) n ORDER BY n`,
          [keys],
        );
        await client.query(`ANALYZE ${table}`);
        // Drained in id order, 68 rows left; then a VACUUM, and no ANALYZE.
        await client.query(
          `UPDATE ${table} SET state = '${kind === 'outbox' ? 'sent' : 'processed'}', attempts = 1, claim_token = gen_random_uuid()
           WHERE id <= (SELECT max(id) - 68 FROM ${table})`,
        );
        await client.query(`VACUUM ${table}`);
        const stale = await pagesToClaim(kind);
        await client.query(`ANALYZE ${table}`);
        const fresh = await pagesToClaim(kind);
        const heads = Math.min(keys, 68);
        assert.equal(stale.claimed, heads, `${kind}: the head of each key`);
        assert.equal(fresh.claimed, heads, kind);
        // A few pages per probe either way; a probe that walked the finished rows would read
        // tens of thousands.
        assert.ok(
          stale.pages <= fresh.pages * 3,
          `${kind}: pages read to find ${heads} heads among 68 rows: ${fresh.pages} with fresh statistics, ${stale.pages} with the backlog's`,
        );
      }
    } finally {
      await client.end();
    }
  });
  it("claims go through the claim functions, not an older version's, and back to the claim statement when those are gone", async () => {
    const db = await newDatabase();
    const t = await createTestApp(db.url, { workers: false });
    try {
      const take = claimsOf(t);
      const dataSource = t.app.get<DataSource>(getDataSourceToken());
      // What the app sends on the connections of node-postgres' pool (observed, not changed).
      const sent: string[] = [];
      type Client = { query(q: { text: string } | string, ...rest: unknown[]): unknown; observed?: boolean };
      const pool = (dataSource.driver as unknown as { master: { on(event: 'acquire', listener: (client: Client) => void): void } }).master;
      pool.on('acquire', (client) => {
        if (client.observed) return;
        client.observed = true;
        const query = client.query.bind(client);
        client.query = (q, ...rest) => {
          sent.push(typeof q === 'string' ? q : q.text);
          return query(q, ...rest);
        };
      });
      const fill = async () => {
        await db.query('TRUNCATE queuebox_outbox, queuebox_inbox');
        await dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'd', key: 'k', payload: 1 }));
        await db.query(`INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload) VALUES
          ('relayed', 'i1', 'a', '1'), ('pulled', 'i1', 'a', '1')`);
      };
      const claimAll = async () => [
        (await take.outbox.claim({ limit: 10, leaseMs: 60_000 })).length,
        (await take.relay.claim({ sources: ['relayed'], limit: 10, leaseMs: 60_000 })).length,
        (await take.pull.claimBatch({ source: 'pulled', limit: 10, leaseMs: 60_000 })).length,
      ];
      const functions = { outbox: 'queuebox_outbox_claim', relay: 'queuebox_inbox_relay_claim', pull: 'queuebox_inbox_pull_claim' };
      await fill();
      assert.deepEqual(await claimAll(), [1, 1, 1]);
      for (const fn of Object.values(functions)) {
        assert.ok(
          sent.some((text) => text.includes(`FROM "${fn}"(`)),
          `a claim called ${fn}`,
        );
      }
      // A function of an older version (its source differs from this version's claim): not used.
      // Made to fail with its own name, so a claim that reached it would say so.
      await db.query(
        `CREATE OR REPLACE FUNCTION queuebox_inbox_pull_claim(p_limit integer, p_lease_ms bigint, p_source text, p_instance uuid) RETURNS SETOF queuebox_inbox
         LANGUAGE plpgsql AS $f$ BEGIN RAISE EXCEPTION 'reached the old queuebox_inbox_pull_claim'; END $f$`,
      );
      const restarted = await createTestApp(db.url, { workers: false });
      try {
        await fill();
        const take = claimsOf(restarted);
        assert.equal((await take.pull.claimBatch({ source: 'pulled', limit: 10, leaseMs: 60_000 })).length, 1);
        assert.equal((await take.outbox.claim({ limit: 10, leaseMs: 60_000 })).length, 1);
        assert.ok(
          restarted.logger.has('warn', 'written by an older QueueBox version') &&
            restarted.logger.has('warn', 'QueueBoxClaimProbes1796342400000'),
          'says which migration brings them up to date',
        );
      } finally {
        await restarted.app.close();
      }
      // Gone (migration 006 rolled back while the application runs): the claim statement, same rows.
      for (const [kind, fn] of Object.entries(functions)) {
        const args = { outbox: 'integer, bigint, uuid', relay: 'integer, bigint, text[], uuid', pull: 'integer, bigint, text, uuid' }[kind];
        await db.query(`DROP FUNCTION ${fn}(${args})`);
      }
      await fill();
      assert.deepEqual(await claimAll(), [1, 1, 1]);
    } finally {
      await t.app.close();
    }
  });

  it('migration 006 replaces the claim functions of an older version (migrations 003 and 005 of earlier versions wrote them)', async () => {
    const db = await newDatabase({ migrate: false });
    const migrations = createQueueBoxMigrations();
    const run = (classes: typeof migrations) => runMigrations(db.url, classes);
    await run(migrations.slice(0, 4));
    await db.query(
      `CREATE OR REPLACE FUNCTION queuebox_inbox_pull_claim(p_limit integer, p_lease_ms bigint, p_source text) RETURNS SETOF queuebox_inbox
       LANGUAGE plpgsql AS $f$ BEGIN RAISE EXCEPTION 'an older version'; END $f$`,
    );
    await run(migrations);
    assert.deepEqual(
      await db.query("SELECT to_regprocedure('queuebox_inbox_pull_claim(integer, bigint, text)')::text AS legacy"),
      [{ legacy: null }],
      'the older signature is dropped',
    );
    const t = await createTestApp(db.url, { workers: false });
    try {
      await db.query(`INSERT INTO queuebox_inbox (source, idempotency_key, payload) VALUES ('pulled', 'i1', '1')`);
      assert.equal((await claimsOf(t).pull.claimBatch({ source: 'pulled', limit: 10, leaseMs: 60_000 })).length, 1);
      assert.ok(!t.logger.has('warn', 'older QueueBox version'), t.logger.lines.map((line) => line.message).join('\n'));
    } finally {
      await t.app.close();
    }
  });

  it("migration 007 rewrites the claim functions that 006 wrote with an earlier version's head probes", async () => {
    const db = await newDatabase({ migrate: false });
    const migrations = createQueueBoxMigrations();
    const run = (classes: typeof migrations) => runMigrations(db.url, classes);
    await run([...migrations.slice(0, 6), ...migrations.slice(7)]); // all but 007
    // What 006 of the version before wrote: the same signature, another source.
    await db.query(
      `CREATE OR REPLACE FUNCTION queuebox_outbox_claim(p_limit integer, p_lease_ms bigint, p_instance uuid) RETURNS SETOF queuebox_outbox
       LANGUAGE plpgsql AS $f$ BEGIN RAISE EXCEPTION 'an earlier version'; END $f$`,
    );
    const before = await createTestApp(db.url, { workers: false });
    try {
      await before.app
        .get<DataSource>(getDataSourceToken())
        .transaction((manager) => before.get(OutboxService).enqueue(manager, { destination: 'd', key: 'k', payload: 1 }));
      assert.equal((await claimsOf(before).outbox.claim({ limit: 10, leaseMs: 60_000 })).length, 1, 'claimed by the statement');
      assert.ok(before.logger.has('warn', 'QueueBoxClaimProbes1796342400000'), 'names the migration that rewrites them');
    } finally {
      await before.app.close();
    }
    await run(migrations);
    const after = await createTestApp(db.url, { workers: false });
    try {
      await db.query('TRUNCATE queuebox_outbox');
      await after.app
        .get<DataSource>(getDataSourceToken())
        .transaction((manager) => after.get(OutboxService).enqueue(manager, { destination: 'd', key: 'k', payload: 1 }));
      assert.equal((await claimsOf(after).outbox.claim({ limit: 10, leaseMs: 60_000 })).length, 1);
      assert.ok(!after.logger.has('warn', 'older QueueBox version'), after.logger.lines.map((line) => line.message).join('\n'));
    } finally {
      await after.app.close();
    }
  });
});

type PlanNode = Record<string, unknown> & { Plans?: PlanNode[] };

/**
 * Pages the claim read to find its rows: its search CTEs (`near`, `heads`, `far`). Locking and
 * writing the rows found comes after, through the primary key, whose depth grows with log n.
 */
function searchPages(plan: PlanNode): number {
  assert.ok(
    findNode(plan, (n) => n['Subplan Name'] === 'CTE near'),
    'the claim plan has its near CTE',
  );
  let pages = 0;
  for (const name of ['CTE near', 'CTE heads', 'CTE far']) {
    const node = findNode(plan, (n) => n['Subplan Name'] === name);
    if (node) pages += node['Shared Hit Blocks'] + node['Shared Read Blocks'];
  }
  return pages;
}
function findNode(node: PlanNode, match: (node: PlanNode) => boolean): (PlanNode & Record<string, number>) | undefined {
  if (match(node)) return node as PlanNode & Record<string, number>;
  for (const child of node.Plans ?? []) {
    const found = findNode(child, match);
    if (found) return found;
  }
  return undefined;
}
