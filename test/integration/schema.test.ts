import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { QUEUEBOX_RESOLVED_OPTIONS } from '../../lib/common/queuebox.constants';
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
import { eventually, runMigrations, testDatabases } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

const ROOT = join(__dirname, '..', '..', '..');

describe('schema', () => {
  const newDatabase = testDatabases();

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
    await db.query(readFileSync(join(ROOT, 'sql/postgres/010_queuebox_pauses.up.sql'), 'utf8'));
    await db.query(readFileSync(join(ROOT, 'sql/postgres/011_queuebox_attempts.up.sql'), 'utf8'));
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
    await db.query(readFileSync(join(ROOT, 'sql/postgres/011_queuebox_attempts.down.sql'), 'utf8'));
    assert.deepEqual(await db.query("SELECT tablename FROM pg_tables WHERE tablename LIKE '%\\_attempts'"), [], 'the history tables went');
    assert.deepEqual(await db.query("SELECT column_name FROM information_schema.columns WHERE column_name = 'fingerprint'"), []);
    await db.query(readFileSync(join(ROOT, 'sql/postgres/010_queuebox_pauses.down.sql'), 'utf8'));
    assert.deepEqual(await db.query("SELECT tablename FROM pg_tables WHERE tablename LIKE '%\\_pauses'"), [], 'the pauses table went');
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
        [
          'events_in',
          'events_in_attempts',
          'events_out',
          'events_out_attempts',
          'events_out_pauses',
          'events_out_rate_limits',
          'queuebox_instances',
        ],
        'the instances table beside the outbox, in its schema; each table with its attempt history',
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
            restarted.logger.has('warn', 'QueueBoxKeyedClaims1796860800000'),
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
      assert.ok(before.logger.has('warn', 'QueueBoxKeyedClaims1796860800000'), 'names the migration that rewrites them');
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
