import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import type { MigrationInterface } from 'typeorm';
import { SCHEMA_MIGRATIONS } from '../../lib/dialects/schema-migrations';
import { QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import {
  createQueueBoxAttemptsMigration,
  createQueueBoxInstancesMigration,
  createQueueBoxMigration,
  createQueueBoxPausesMigration,
  createQueueBoxRenewalsMigration,
  QueueBoxAttempts1796688000000,
  QueueBoxClaimFunctions1796169600000,
  QueueBoxClaimPlans1796947200000,
  QueueBoxClaimProbes1796342400000,
  QueueBoxClaims1795996800000,
  QueueBoxInstances1796256000000,
  QueueBoxKeyCollation1796083200000,
  QueueBoxKeyedClaims1796860800000,
  QueueBoxOperations1764633600000,
  QueueBoxPauses1796601600000,
  QueueBoxRateLimits1796428800000,
  QueueBoxRenewals1796515200000,
  QueueBoxSchema1764460800000,
  QueueBoxUnkeyedClaims1796774400000,
} from '../../lib/migrations/queuebox.migration';
import { renderSchemaSql } from '../../lib/migrations/schema-files';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import type { QueueBoxModuleOptions } from '../../lib/types/options';
import { RecordingLogger } from '../support/app';
import { createTestDatabase, runMigrations, type TestDatabase } from '../support/database';

type MigrationClass = new () => MigrationInterface;

/** Runs `migrations` on a fresh database, recorded in `migrationsTableName`. */
async function databaseWith(migrations: MigrationClass[], migrationsTableName?: string): Promise<TestDatabase> {
  const db = await createTestDatabase({ migrate: false });
  await runMigrations(db.url, migrations, migrationsTableName);
  return db;
}

/** Starts an app on `db` whose DataSource lists `migrations` (already run) in `migrationsTableName`. */
async function start(
  db: TestDatabase,
  options: QueueBoxModuleOptions,
  typeorm: { migrations?: MigrationClass[]; migrationsTableName?: string } = {},
): Promise<{ logger: RecordingLogger; close(): Promise<void> }> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url: db.url, logging: false, migrationsRun: true, ...typeorm }),
      QueueBoxModule.forRoot({ workers: false, ...options }),
    ],
  })
  class AppModule {}
  const logger = new RecordingLogger();
  const app = await NestFactory.createApplicationContext(AppModule, { logger, abortOnError: false });
  return { logger, close: () => app.close() };
}

describe('schema version checked at start-up', () => {
  const databases: TestDatabase[] = [];
  const track = (db: TestDatabase) => {
    databases.push(db);
    return db;
  };
  after(async () => {
    for (const db of databases) await db.drop();
  });

  it('starts with every migration recorded, and warns of nothing', async () => {
    const db = track(
      await databaseWith([
        QueueBoxSchema1764460800000,
        QueueBoxOperations1764633600000,
        QueueBoxClaims1795996800000,
        QueueBoxKeyCollation1796083200000,
        QueueBoxClaimFunctions1796169600000,
        QueueBoxInstances1796256000000,
        QueueBoxClaimProbes1796342400000,
        QueueBoxRateLimits1796428800000,
        QueueBoxRenewals1796515200000,
        QueueBoxPauses1796601600000,
        QueueBoxAttempts1796688000000,
        QueueBoxUnkeyedClaims1796774400000,
        QueueBoxKeyedClaims1796860800000,
        QueueBoxClaimPlans1796947200000,
      ]),
    );
    const app = await start(db, { retention: { enabled: true } });
    await app.close();
    assert.deepEqual(
      app.logger.lines.filter((line) => line.level === 'warn'),
      [],
    );
  });

  it('fails with only migration 001, naming the missing required migrations (002 with retention on, 006, 009 and 010) and the command', async () => {
    const db = track(await databaseWith([QueueBoxSchema1764460800000]));
    await assert.rejects(
      start(db, {}),
      /lacks migrations QueueBoxInstances1796256000000, QueueBoxRenewals1796515200000, QueueBoxPauses1796601600000, QueueBoxAttempts1796688000000 /,
    );
    await assert.rejects(start(db, { retention: { enabled: true } }), (error: unknown) => {
      assert.ok(error instanceof QueueBoxConfigError, String(error));
      assert.equal(error.option, 'migrations');
      assert.match(
        error.message,
        /lacks migrations QueueBoxOperations1764633600000, QueueBoxInstances1796256000000, QueueBoxRenewals1796515200000, QueueBoxPauses1796601600000, QueueBoxAttempts1796688000000 /,
      );
      assert.match(error.message, /npx --no-install queuebox migrate`/);
      assert.doesNotMatch(error.message, /QueueBoxClaims/); // optional: a warning, not a failure
      assert.doesNotMatch(error.message, /QueueBoxKeyCollation/); // no statement on PostgreSQL: a warning
      assert.doesNotMatch(error.message, /QueueBoxClaimFunctions/); // no statement in this version: a warning
      assert.doesNotMatch(error.message, /QueueBoxClaimProbes/); // claims are sent as statements until it runs: a warning
      assert.doesNotMatch(error.message, /QueueBoxUnkeyedClaims/); // the same
      assert.doesNotMatch(error.message, /QueueBoxKeyedClaims/); // the same
      assert.doesNotMatch(error.message, /QueueBoxClaimPlans/); // claims are correct without it: a warning
      return true;
    });
  });

  it('starts with migrations 001, 006, 009 and 010 when retention is off, warning of 002, 003, 004, 005, 007 and 008', async () => {
    const db = track(
      await databaseWith([
        QueueBoxSchema1764460800000,
        QueueBoxInstances1796256000000,
        QueueBoxRenewals1796515200000,
        QueueBoxPauses1796601600000,
        QueueBoxAttempts1796688000000,
      ]),
    );
    const app = await start(db, {});
    await app.close();
    assert.ok(app.logger.has('warn', 'QueueBoxOperations1764633600000 is not recorded'), JSON.stringify(app.logger.lines));
    assert.ok(app.logger.has('warn', 'QueueBoxClaims1795996800000 is not recorded'));
    assert.ok(app.logger.has('warn', 'QueueBoxKeyCollation1796083200000 is not recorded'));
    assert.ok(app.logger.has('warn', 'QueueBoxClaimFunctions1796169600000 is not recorded'));
    assert.ok(app.logger.has('warn', 'QueueBoxClaimProbes1796342400000 is not recorded'));
    assert.ok(app.logger.has('warn', 'QueueBoxUnkeyedClaims1796774400000 is not recorded'));
    assert.ok(app.logger.has('warn', 'QueueBoxKeyedClaims1796860800000 is not recorded'));
    assert.ok(app.logger.has('warn', 'QueueBoxClaimPlans1796947200000 is not recorded'));
    assert.ok(app.logger.has('warn', 'QueueBoxRateLimits1796428800000 is not recorded'), 'without outbox.rateLimits: a warning');
    assert.ok(!app.logger.has('warn', 'QueueBoxInstances1796256000000'), 'recorded: no warning');
  });

  it('refuses to start with outbox.rateLimits until migration 008 ran, naming it', async () => {
    const db = track(await databaseWith([QueueBoxSchema1764460800000, QueueBoxInstances1796256000000]));
    await assert.rejects(start(db, { outbox: { rateLimits: { partner: { limit: 5 } } } }), (error: unknown) => {
      assert.ok(error instanceof QueueBoxConfigError, String(error));
      assert.match(error.message, /QueueBoxRateLimits1796428800000/);
      return true;
    });
  });

  it("reads the DataSource's own migrationsTableName and names it in the command", async () => {
    const db = track(await databaseWith([QueueBoxSchema1764460800000], 'app_migrations'));
    await assert.rejects(start(db, { retention: { enabled: true } }, { migrationsTableName: 'app_migrations' }), (error: unknown) => {
      assert.ok(error instanceof QueueBoxConfigError, String(error));
      assert.match(error.message, /migrations table "app_migrations"/);
      assert.match(error.message, /queuebox migrate --migrations-table app_migrations`/);
      return true;
    });
  });

  it('checks the names the app gave its QueueBox migrations', async () => {
    const tables = { outbox: 'billing_outbox', inbox: 'billing_inbox' };
    const renamed = createQueueBoxMigration({ tables, name: 'BillingQueueBox1790000000000' });
    const instances = createQueueBoxInstancesMigration({ tables, name: 'BillingInstances1790000000001' });
    const renewals = createQueueBoxRenewalsMigration({ tables, name: 'BillingRenewals1790000000002' });
    const pauses = createQueueBoxPausesMigration({ tables, name: 'BillingPauses1790000000003' });
    const attempts = createQueueBoxAttemptsMigration({ tables, name: 'BillingAttempts1790000000003' });
    const db = track(await databaseWith([renamed, instances, renewals, pauses, attempts]));
    await assert.rejects(
      start(db, { tables, retention: { enabled: true } }, { migrations: [renamed, instances, renewals, pauses, attempts] }),
      /lacks migration QueueBoxOperations1764633600000 /,
    );
    const app = await start(db, { tables }, { migrations: [renamed, instances, renewals, pauses, attempts] });
    await app.close();
    assert.ok(
      !app.logger.lines.some((line) => line.message.includes('BillingQueueBox1790000000000')),
      'the renamed schema migration counts as recorded',
    );
    assert.ok(!app.logger.lines.some((line) => line.message.includes('Instances')), 'and the renamed instances migration');
  });

  it('does not version tables created from plain SQL (no record at all), and says so', async () => {
    const db = track(await createTestDatabase({ migrate: false }));
    for (const migration of SCHEMA_MIGRATIONS) await db.query(renderSchemaSql('postgres', { migration }));
    const app = await start(db, { retention: { enabled: true } });
    await app.close();
    assert.ok(app.logger.has('log', 'their version is not checked'), JSON.stringify(app.logger.lines));
  });
});
