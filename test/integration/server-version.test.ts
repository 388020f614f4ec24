import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { isSupportedServerVersion, MIN_SERVER_VERSION_NUM, serverVersionCheckSql } from '../../lib/dialects/postgres/checks.sql';
import { QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import { createQueueBoxMigration } from '../../lib/migrations/queuebox.migration';
import { createPullClient } from '../../lib/pull/create-pull-client';
import { describeWithDatabase } from '../support/database';

const ROOT = join(__dirname, '..', '..', '..');

interface EmbeddedScript {
  startEmbeddedPostgres(p: { major?: string; log?: (line: string) => void }): Promise<{ url: string; stop(): Promise<void> }>;
  UNSUPPORTED_POSTGRES_BUILDS: Record<string, string>;
}

const serverVersionNum = async (url: string) => {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    return Number((await client.query("SELECT current_setting('server_version_num') AS v")).rows[0].v);
  } finally {
    await client.end();
  }
};

describe('PostgreSQL server versions', () => {
  it('supports 14 and later, by server_version_num', () => {
    assert.equal(MIN_SERVER_VERSION_NUM, 140000);
    assert.equal(isSupportedServerVersion(130023), false);
    assert.equal(isSupportedServerVersion(140000), true);
    assert.equal(isSupportedServerVersion(180004), true);
    assert.equal(isSupportedServerVersion(Number.NaN), false);
  });

  describeWithDatabase('on the suite server', { migrate: false }, (db) => {
    it("passes migration 001's check, and its check refuses a server older than the minimum it is given", async () => {
      await db.query(serverVersionCheckSql());
      const current = await serverVersionNum(db.url);
      assert.ok(isSupportedServerVersion(current), `the suite server (${current}) is a supported one`);
      await assert.rejects(db.query(serverVersionCheckSql(current + 1)), (error: Error) => {
        assert.match(
          error.message,
          new RegExp(
            `^QueueBox supports PostgreSQL ${Math.floor((current + 1) / 10000)} and later; this server runs PostgreSQL \\d+\\.\\d+`,
          ),
        );
        return true;
      });
    });
  });

  describe('on a real PostgreSQL 13 server', () => {
    let server: { url: string; stop(): Promise<void> } | undefined;
    before(async () => {
      const script = (await import(pathToFileURL(join(ROOT, 'scripts/embedded-postgres.mjs')).href)) as EmbeddedScript;
      assert.ok(script.UNSUPPORTED_POSTGRES_BUILDS['13']);
      server = await script.startEmbeddedPostgres({ major: '13' });
    });
    after(() => server?.stop());

    const dataSourceOn = async (migrations: (new () => unknown)[] = []) => {
      const name = `qb_old_${randomBytes(4).toString('hex')}`;
      const admin = new Client({ connectionString: server!.url });
      await admin.connect();
      await admin.query(`CREATE DATABASE ${name}`);
      await admin.end();
      const url = new URL(server!.url);
      url.pathname = `/${name}`;
      return new DataSource({ type: 'postgres', url: url.toString(), migrations: migrations as never, logging: false });
    };

    it('start-up refuses it with a QueueBoxConfigError naming its version, before looking for tables', async () => {
      assert.equal(Math.floor((await serverVersionNum(server!.url)) / 10000), 13);
      const dataSource = await dataSourceOn();
      await dataSource.initialize();
      try {
        await assert.rejects(createPullClient(dataSource), (error: unknown) => {
          assert.ok(error instanceof QueueBoxConfigError, String(error));
          assert.equal(error.option, 'dataSource');
          assert.match(error.message, /^QueueBox supports PostgreSQL 14 and later; this server runs PostgreSQL 13\.\d+\./);
          return true;
        });
      } finally {
        await dataSource.destroy();
      }
    });

    it('migration 001 refuses it before creating anything', async () => {
      const dataSource = await dataSourceOn([createQueueBoxMigration()]);
      await dataSource.initialize();
      try {
        await assert.rejects(
          dataSource.runMigrations({ transaction: 'all' }),
          /QueueBox supports PostgreSQL 14 and later; this server runs PostgreSQL 13\./,
        );
        const tables = await dataSource.query("SELECT count(*)::int AS n FROM pg_tables WHERE tablename LIKE 'queuebox%'");
        assert.equal(tables[0].n, 0);
      } finally {
        await dataSource.destroy();
      }
    });
  });
});
