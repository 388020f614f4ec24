import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type INestApplicationContext, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { DataSource, type MigrationInterface, type QueryRunner } from 'typeorm';
import { DEFAULT_MIGRATION_NAMES } from '../../lib/dialects/schema-migrations';
import { QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import { QueueBoxHealth } from '../../lib/health/queuebox-health';
import { QueueBoxInstance } from '../../lib/instance/queuebox.instance';
import { createQueueBoxMigrations } from '../../lib/migrations/queuebox.migration';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import { QueueBoxTenants, QueueBoxTenantsModule } from '../../lib/module/queuebox.tenants';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import type { QueueBoxModuleOptions } from '../../lib/types/options';
import { RecordingLogger } from '../support/app';
import { createTestDatabase, describeWithDatabase, eventually, type TestDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

// Issue 34, item 2 (I13): a QueueBox whose DataSource is initialized after start-up (TypeORM's
// manualInitialization) checks the schema, registers its instance and starts its workers once
// initialize() has resolved, in that order; before, its workers claimed once the DataSource was
// up, unregistered, and the schema was never checked. A tenant cannot be attached on a DataSource
// that is not initialized.

const INSTANCES = { heartbeatMs: 100, deadAfterMs: 1000 };

/** Runs for a while before the QueueBox migrations (named to sort first): TypeORM reports `isInitialized` all along. */
class SlowFirstMigration1700000000000 implements MigrationInterface {
  name = 'SlowFirstMigration1700000000000';
  async up(runner: QueryRunner): Promise<void> {
    await runner.query('SELECT pg_sleep(0.6)');
  }
  async down(): Promise<void> {}
}

describe('a DataSource initialized after start-up (I13)', () => {
  const databases: TestDatabase[] = [];
  const contexts: INestApplicationContext[] = [];
  const newDatabase = async (migrate = true) => {
    const db = await createTestDatabase({ migrate });
    databases.push(db);
    return db;
  };
  after(async () => {
    for (const context of contexts) await context.close().catch(() => undefined);
    for (const db of databases) await db.drop();
  });

  const appModule = (url: string, options: QueueBoxModuleOptions, typeorm: Record<string, unknown> = {}) => {
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url, logging: false, manualInitialization: true, ...typeorm }),
        QueueBoxModule.forRoot({ instances: INSTANCES, ...options }),
      ],
    })
    class AppModule {}
    return AppModule;
  };
  const start = async (url: string, options: QueueBoxModuleOptions, typeorm?: Record<string, unknown>) => {
    const logger = new RecordingLogger();
    const app = await NestFactory.createApplicationContext(appModule(url, options, typeorm), { logger, abortOnError: false });
    contexts.push(app);
    return { app, logger, dataSource: app.get<DataSource>(getDataSourceToken()) };
  };
  const pendingMessage = (db: TestDatabase) =>
    db.query<{ id: string }>(
      `INSERT INTO queuebox_outbox (message_id, destination, payload) VALUES (gen_random_uuid(), 'billing', '"late"') RETURNING id`,
    );

  it('nothing claims before initialize(); then the instance registers before its workers claim, and heartbeats', async () => {
    const db = await newDatabase();
    const publisher = new RecordingPublisher();
    const { app, logger, dataSource } = await start(db.url, { outbox: { publisher, pollIntervalMs: 20 } });
    const instance = app.get(QueueBoxInstance);
    assert.ok(logger.has('log', 'waits for its DataSource "default" to be initialized'), JSON.stringify(logger.lines));
    assert.equal(app.get(OutboxPoller).statuses[0].running, false, 'no worker runs yet');
    assert.equal(instance.status.registered, false);
    const waiting = await app.get(QueueBoxHealth).check({ maxLagMs: false });
    assert.equal(waiting.healthy, false);
    assert.equal(waiting.database, 'down');
    assert.equal(waiting.instance.registered, false);
    assert.deepEqual(
      waiting.workers.map((worker) => worker.running),
      [false],
    );
    const [{ id }] = await pendingMessage(db);

    await dataSource.initialize();
    await eventually(async () => publisher.calls.length === 1, 'the message to be published');
    await eventually(async () => (await db.query(`SELECT 1 FROM queuebox_outbox WHERE state = 'sent'`)).length === 1, 'sent');
    const [row] = await db.query<{ claimed_by: string; claimed_at: Date }>(
      'SELECT claimed_by, claimed_at FROM queuebox_outbox WHERE id = $1',
      [id],
    );
    const [registered] = await db.query<{ id: string; started_at: Date }>('SELECT id, started_at FROM queuebox_instances');
    assert.equal(registered?.id, instance.id, 'its instance row exists');
    assert.equal(row.claimed_by, instance.id);
    assert.ok(
      registered.started_at <= row.claimed_at,
      `registered (${registered.started_at.toISOString()}) before it claimed (${row.claimed_at.toISOString()})`,
    );
    assert.ok(instance.status.registered);
    assert.ok(logger.has('log', `checked the schema, registered instance ${instance.id} and starts its workers`));
    await eventually(
      async () => (await db.query('SELECT 1 FROM queuebox_instances WHERE heartbeat_at > started_at')).length === 1,
      'a heartbeat',
    );
  });

  it('waits for initialize() to resolve, not for isInitialized: migrationsRun’s migrations run first', async () => {
    const db = await newDatabase(false);
    const publisher = new RecordingPublisher();
    const { app, logger, dataSource } = await start(
      db.url,
      { outbox: { publisher, pollIntervalMs: 20 } },
      { migrations: [SlowFirstMigration1700000000000, ...createQueueBoxMigrations()], migrationsRun: true },
    );
    await dataSource.initialize();
    await eventually(async () => app.get(QueueBoxInstance).status.registered, 'the instance to register');
    assert.deepEqual(
      logger.lines.filter((line) => line.level === 'error'),
      [],
      'no schema check ran while the migrations did',
    );
    await pendingMessage(db);
    await eventually(async () => publisher.calls.length === 1, 'the message to be published');
  });

  it('a failed schema check starts nothing, is logged once, and runs again every heartbeat until it passes', async () => {
    const db = await newDatabase();
    const missing = DEFAULT_MIGRATION_NAMES.instances;
    await db.query('DELETE FROM migrations WHERE name = $1', [missing]);
    await pendingMessage(db);
    const publisher = new RecordingPublisher();
    const { app, logger, dataSource } = await start(db.url, { outbox: { publisher, pollIntervalMs: 20 } });
    await dataSource.initialize();
    const failed = () =>
      logger.lines.filter((line) => line.level === 'error' && line.message.includes('cannot start yet on DataSource "default"'));
    await eventually(async () => failed().length > 0, 'the failed check to be logged');
    assert.match(failed()[0].message, new RegExp(`lacks migration ${missing}`));
    assert.match(failed()[0].message, /tries again every 100 ms/);
    assert.equal(app.get(OutboxPoller).statuses[0].running, false, 'no worker runs');
    const health = await app.get(QueueBoxHealth).check({ maxLagMs: false });
    assert.equal(health.database, 'up');
    assert.equal(health.instance.registered, false);
    assert.deepEqual(
      health.workers.map((worker) => worker.running),
      [false],
    );
    assert.deepEqual(await db.query('SELECT id FROM queuebox_instances'), [], 'not registered');
    assert.equal(publisher.calls.length, 0);

    await db.query('INSERT INTO migrations (timestamp, name) VALUES ($1, $2)', [Number(missing.slice(-13)), missing]);
    await eventually(async () => publisher.calls.length === 1, 'the message to be published');
    assert.equal((await db.query('SELECT id FROM queuebox_instances')).length, 1);
    assert.equal(failed().length, 1, 'the same failure is logged once');
  });

  it('a DataSource initialized between the module’s build and its start is checked before the instance registers', async () => {
    const db = await newDatabase();
    const missing = DEFAULT_MIGRATION_NAMES.instances;
    await db.query('DELETE FROM migrations WHERE name = $1', [missing]);
    const moduleRef = await Test.createTestingModule({ imports: [appModule(db.url, { workers: false })] })
      .setLogger(new RecordingLogger())
      .compile();
    contexts.push(moduleRef);
    await moduleRef.get<DataSource>(getDataSourceToken()).initialize();
    await assert.rejects(
      moduleRef.init(),
      (error: unknown) => error instanceof QueueBoxConfigError && error.message.includes(`lacks migration ${missing}`),
    );
    assert.deepEqual(await db.query('SELECT id FROM queuebox_instances'), [], 'not registered');
  });

  it('closing the application while it waits ends the wait and registers nothing', async () => {
    const db = await newDatabase();
    const { app, dataSource } = await start(db.url, { outbox: { publisher: new RecordingPublisher() } });
    await app.close();
    assert.equal(app.get(QueueBoxInstance).status.registered, false);
    assert.equal(dataSource.isInitialized, false);
    assert.deepEqual(await db.query('SELECT id FROM queuebox_instances'), []);
  });
});

describeWithDatabase('QueueBoxTenants.attach on a DataSource that is not initialized', (db) => {
  let app: INestApplicationContext;
  before(async () => {
    @Module({ imports: [QueueBoxTenantsModule] })
    class AppModule {}
    app = await NestFactory.createApplicationContext(AppModule, { logger: new RecordingLogger(), abortOnError: false });
  });
  after(async () => {
    await app?.close();
  });

  it('refuses one never initialized, and one destroyed, with QueueBoxConfigError; nothing runs or registers', async () => {
    const tenants = app.get(QueueBoxTenants);
    const refused = (error: unknown) => {
      assert.ok(error instanceof QueueBoxConfigError, String(error));
      assert.equal(error.option, 'dataSource');
      assert.match(error.message, /QueueBoxTenants\.attach\("acme"\) needs an initialized TypeORM DataSource/);
      assert.match(error.message, /await dataSource\.initialize\(\)/);
      return true;
    };
    const options = { outbox: { publisher: new RecordingPublisher() }, instances: INSTANCES };
    const never = new DataSource({ type: 'postgres', url: db.url, logging: false });
    await assert.rejects(tenants.attach('acme', { dataSource: never, ...options }), refused);
    const destroyed = await new DataSource({ type: 'postgres', url: db.url, logging: false }).initialize();
    await destroyed.destroy();
    await assert.rejects(tenants.attach('acme', { dataSource: destroyed, ...options }), refused);
    assert.deepEqual(tenants.names(), []);
    assert.deepEqual(await db.query('SELECT id FROM queuebox_instances'), []);
    // The name is free again: an initialized DataSource attaches under it.
    const dataSource = await new DataSource({ type: 'postgres', url: db.url, logging: false }).initialize();
    try {
      await tenants.attach('acme', { dataSource, ...options });
      assert.equal((await db.query('SELECT id FROM queuebox_instances')).length, 1);
      await tenants.detach('acme');
    } finally {
      await dataSource.destroy();
    }
  });
});
