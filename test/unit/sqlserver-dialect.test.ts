import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { Logger } from '@nestjs/common';
import { TYPES } from 'tedious';
import { DataSource, type DataSourceOptions, MssqlParameter, QueryFailedError } from 'typeorm';
import { migrationNotes } from '../../lib/cli/cli-options';
import { createDialect } from '../../lib/core/create-dialect';
import { finishedCountQuery, rowStatesQuery, schemaStatements } from '../../lib/dialects/drivers';
import * as admin from '../../lib/dialects/sqlserver/admin.sql';
import * as checks from '../../lib/dialects/sqlserver/checks.sql';
import * as claims from '../../lib/dialects/sqlserver/claims.sql';
import * as followers from '../../lib/dialects/sqlserver/followers.sql';
import * as inbox from '../../lib/dialects/sqlserver/inbox.sql';
import * as instances from '../../lib/dialects/sqlserver/instances.sql';
import * as lease from '../../lib/dialects/sqlserver/lease.sql';
import * as outbox from '../../lib/dialects/sqlserver/outbox.sql';
import * as retention from '../../lib/dialects/sqlserver/retention.sql';
import { SqlServerDialect } from '../../lib/dialects/sqlserver/sqlserver.dialect';
import { sqlServerRequestTimeout } from '../../lib/dialects/sqlserver/sqlserver.options';
import { QueueBoxConfigError, QueueBoxError, QueueBoxValidationError } from '../../lib/errors/queuebox.errors';
import {
  createQueueBoxKeyCollationMigration,
  createQueueBoxMigration,
  createQueueBoxOperationsMigration,
} from '../../lib/migrations/queuebox.migration';
import { renderSchemaFiles, renderSchemaSql } from '../../lib/migrations/schema-files';
import { QueueBoxPoolCheck } from '../../lib/module/queuebox.pool-check';
import { resolveTables } from '../../lib/options/options.resolver';

/** Every SQL Server statement builder: the exports of its *.sql.ts files. */
const sql = { ...outbox, ...inbox, ...claims, ...followers, ...lease, ...checks, ...admin, ...retention };

// The SQL Server dialect's own logic, without a server: option checks, and the way it drives
// TypeORM (which connection, which transaction, which typed parameters) through a scripted
// QueryRunner. What the statements do on a server is the conformance suite's job.

const TABLES = resolveTables(undefined);

/** A DataSource for SQL Server that is never initialized: creating it loads the mssql driver but connects nowhere. */
const mssqlDataSource = (options: Record<string, unknown> = {}) =>
  new DataSource({ type: 'mssql', host: '127.0.0.1', username: 'sa', password: 'x', database: 'app', ...options } as DataSourceOptions);

interface Call {
  runner: number;
  what: 'startTransaction' | 'commitTransaction' | 'rollbackTransaction' | 'release' | 'query';
  isolation?: string;
  /** The statement as its builder wrote it, without the READ COMMITTED pin the dialect puts before statements outside a transaction. */
  sql?: string;
  /** Whether it was sent after PINNED_READ_COMMITTED. */
  pinned?: boolean;
  /** Whether it was sent after the admin statements' ADMIN (low deadlock priority, bounded lock wait). */
  admin?: boolean;
  params?: unknown[];
}

/** A claim batch (it takes the claim lock). */
const isClaim = (statement: string) => statement.includes('EXEC @claim_lock = sp_getapplock');

/** A DataSource stand-in whose QueryRunners record what they are asked and answer from `respond`. */
function scriptedDataSource(respond: (sql: string, params: unknown[]) => { records?: unknown[]; affected?: number } | Error) {
  const calls: Call[] = [];
  let runners = 0;
  const options: { type: 'mssql'; isolationLevel?: string } = { type: 'mssql' };
  const createQueryRunner = () => {
    const runner = ++runners;
    const queryRunner = {
      id: runner,
      isReleased: false,
      isTransactionActive: false,
      // As TypeORM's SqlServerQueryRunner: a transaction begun without a level takes the DataSource's.
      async startTransaction(isolation?: string) {
        calls.push({ runner, what: 'startTransaction', isolation: isolation ?? options.isolationLevel });
        queryRunner.isTransactionActive = true;
      },
      async commitTransaction() {
        calls.push({ runner, what: 'commitTransaction' });
        queryRunner.isTransactionActive = false;
      },
      async rollbackTransaction() {
        calls.push({ runner, what: 'rollbackTransaction' });
        queryRunner.isTransactionActive = false;
      },
      async release() {
        calls.push({ runner, what: 'release' });
        queryRunner.isReleased = true;
      },
      async query(sent: string, params: unknown[] = [], structured = false) {
        const pinned = sent.startsWith(lease.PINNED_READ_COMMITTED);
        const unpinned = pinned ? sent.slice(lease.PINNED_READ_COMMITTED.length) : sent;
        const admin = unpinned.startsWith(sql.ADMIN);
        const statement = admin ? unpinned.slice(sql.ADMIN.length) : unpinned;
        calls.push({ runner, what: 'query', sql: statement, pinned, admin, params });
        const answer = respond(statement, params);
        if (answer instanceof Error) throw answer;
        // As TypeORM: the records alone unless a structured result is asked for.
        return structured ? { records: answer.records ?? [], affected: answer.affected ?? 0 } : (answer.records ?? []);
      },
      get manager() {
        return { queryRunner };
      },
    };
    return queryRunner;
  };
  const dataSource = {
    options,
    createQueryRunner,
    // As TypeORM: transaction(work) or transaction(isolationLevel, work).
    async transaction<T>(
      levelOrWork: string | ((manager: unknown) => Promise<T>),
      maybeWork?: (manager: unknown) => Promise<T>,
    ): Promise<T> {
      const [level, work] = typeof levelOrWork === 'string' ? [levelOrWork, maybeWork] : [undefined, levelOrWork];
      if (!work) throw new Error('transaction(level) without a callback');
      const runner = createQueryRunner();
      await runner.startTransaction(level);
      try {
        const result = await work(runner.manager);
        await runner.commitTransaction();
        return result;
      } catch (error) {
        await runner.rollbackTransaction();
        throw error;
      } finally {
        await runner.release();
      }
    },
  };
  return { dataSource: dataSource as unknown as DataSource, calls };
}

const typed = (params: unknown[] | undefined) =>
  (params ?? []).map((p) => (p instanceof MssqlParameter ? [p.type, p.value, ...p.params.filter((x) => x !== undefined)] : p));

const sqlError = (number: number) => Object.assign(new Error(`SQL Server error ${number}`), { number });

describe('SQL Server dialect: start-up checks', () => {
  it('is chosen for TypeORM type "mssql", and an unknown type names both supported ones', () => {
    assert.equal(createDialect(mssqlDataSource(), TABLES).type, 'mssql');
    assert.throws(
      () => createDialect({ options: { type: 'mysql' } } as unknown as DataSource, TABLES),
      (error: unknown) => error instanceof QueueBoxConfigError && /"postgres" and "mssql".*"mysql"/.test(error.message),
    );
  });

  it('refuses a request timeout shorter than the 10 s lock wait plus margin, naming the option to raise', () => {
    const cases: [Record<string, unknown>, string, number][] = [
      [{ requestTimeout: 5000 }, 'requestTimeout', 5000],
      [{ requestTimeout: 14_999 }, 'requestTimeout', 14_999],
      [{ extra: { requestTimeout: 10_000 } }, 'extra.requestTimeout', 10_000],
      [{ requestTimeout: 60_000, extra: { requestTimeout: 2000 } }, 'extra.requestTimeout', 2000],
      [{ options: { requestTimeout: 8000 } }, 'options.requestTimeout', 8000],
      [{ requestTimeout: 60_000, options: { requestTimeout: 8000 } }, 'options.requestTimeout', 8000],
      [{ options: { requestTimeout: 60_000 }, extra: { options: { requestTimeout: 3000 } } }, 'extra.options.requestTimeout', 3000],
      [{ extra: { timeout: 1000 } }, 'extra.timeout', 1000],
    ];
    for (const [options, option, ms] of cases) {
      assert.throws(
        () => createDialect(mssqlDataSource(options), TABLES),
        (error: unknown) => {
          assert.ok(error instanceof QueueBoxConfigError, String(error));
          assert.equal(error.option, option);
          assert.match(error.message, new RegExp(`request timeout is ${ms} ms \\(TypeORM option "${option.replace(/\./g, '\\.')}"\\)`));
          assert.match(error.message, /may wait 10000 ms for its application lock/);
          assert.match(error.message, new RegExp(`Raise "${option.replace(/\./g, '\\.')}" to at least 15000 \\(or 0 for none\\)`));
          return true;
        },
        JSON.stringify(options),
      );
    }
  });

  it('accepts mssql default (15 s), a longer timeout, and none', () => {
    for (const options of [
      {},
      { requestTimeout: 15_000 },
      { requestTimeout: 120_000 },
      { requestTimeout: 0 },
      { requestTimeout: -1 },
      { options: { requestTimeout: 30_000 }, requestTimeout: 1000 },
    ]) {
      assert.equal(createDialect(mssqlDataSource(options), TABLES).type, 'mssql', JSON.stringify(options));
    }
    assert.deepEqual(sqlServerRequestTimeout({ type: 'mssql' } as DataSourceOptions), { ms: 15_000, option: 'requestTimeout' });
    assert.deepEqual(sqlServerRequestTimeout({ type: 'mssql', requestTimeout: Number.POSITIVE_INFINITY } as DataSourceOptions), {
      ms: 0,
      option: 'requestTimeout',
    });
  });

  it('schemaCheck names a missing table, and a compatibility level below 130', async () => {
    const missing = scriptedDataSource((statement) => (statement === sql.tableExistsSql() ? { records: [{ found: null }] } : {}));
    await assert.rejects(
      createDialect(missing.dataSource, TABLES).schemaCheck(),
      (error: unknown) =>
        error instanceof QueueBoxConfigError && error.option === 'tables.outbox' && /"queuebox_outbox" does not exist/.test(error.message),
    );
    assert.deepEqual(typed(missing.calls[0].params), [['nvarchar', '[queuebox_outbox]', 300]]);
    const old = scriptedDataSource((statement) =>
      statement === sql.tableExistsSql()
        ? { records: [{ found: 42 }] }
        : statement === sql.keyCollationSql()
          ? { records: [] }
          : { records: [{ compatibility_level: 120 }] },
    );
    await assert.rejects(
      createDialect(old.dataSource, TABLES).schemaCheck(),
      (error: unknown) => error instanceof QueueBoxConfigError && /compatibility level 130 .* this database is at 120/.test(error.message),
    );
  });
});

describe('SQL Server dialect: READ_COMMITTED_SNAPSHOT and row-lock waits (issue 14, item 3)', () => {
  it('warns at start-up when READ_COMMITTED_SNAPSHOT is off, naming the fix; silent when it is on', async () => {
    const warned: string[] = [];
    const warn = Logger.prototype.warn;
    Logger.prototype.warn = (message: unknown) => {
      warned.push(String(message));
    };
    try {
      for (const rcsi of [false, true]) {
        const { dataSource } = scriptedDataSource((statement) => {
          if (statement === sql.tableExistsSql()) return { records: [{ found: 1 }] };
          if (statement === sql.keyCollationSql()) return { records: [] };
          return { records: [{ compatibility_level: 160, is_read_committed_snapshot_on: rcsi }] };
        });
        await createDialect(dataSource, TABLES).schemaCheck();
      }
    } finally {
      Logger.prototype.warn = warn;
    }
    assert.equal(warned.length, 1, warned.join('\n'));
    assert.match(
      warned[0],
      /READ_COMMITTED_SNAPSHOT is OFF .*passes over that key after waiting at most 200 ms.*the other keys are claimed as usual; a followers read that meets one waits at most 500 ms and then hands out no followers.*\(ALTER DATABASE CURRENT SET READ_COMMITTED_SNAPSHOT ON\)/,
    );
  });

  it('a claim whose row-lock wait ran out (error 1222) is a clear error, and the connection gets its lock timeout back', async () => {
    const { dataSource, calls } = scriptedDataSource((statement) => (isClaim(statement) ? sqlError(1222) : {}));
    await assert.rejects(createDialect(dataSource, TABLES).outboxClaimBatch({ limit: 1, leaseMs: 1000 }), (error: unknown) => {
      assert.ok(error instanceof QueueBoxError);
      assert.equal(error.code, 'QUEUEBOX_CLAIM_LOCK');
      assert.match(error.message, /waited more than 3000 ms for a row lock \(SQL Server error 1222\)/);
      return true;
    });
    // Nothing to reset afterwards: the batch's SET LOCK_TIMEOUT ends with it (issue 26 N9).
    assert.deepEqual(
      calls.map((c) => c.what),
      ['startTransaction', 'query', 'rollbackTransaction', 'release'],
    );
  });
});

describe('SQL Server dialect: keys compared exactly (issue 14, item 1)', () => {
  it('schemaCheck refuses key columns that are not Latin1_General_100_BIN2, naming them and migration 004', async () => {
    const collations: Record<string, { column: string; collation: string }[]> = {
      '[queuebox_outbox]': [
        { column: 'destination', collation: 'Latin1_General_100_BIN2' },
        { column: 'key', collation: 'Latin1_General_100_BIN2' },
      ],
      '[queuebox_inbox]': [
        { column: 'source', collation: 'Latin1_General_100_BIN2' },
        { column: 'idempotency_key', collation: 'SQL_Latin1_General_CP1_CI_AS' },
        { column: 'aggregate_id', collation: 'SQL_Latin1_General_CP1_CI_AS' },
      ],
    };
    const respond = (statement: string, params: unknown[]) => {
      if (statement === sql.tableExistsSql()) return { records: [{ found: 1 }] };
      if (statement === sql.keyCollationSql()) return { records: collations[(params[0] as MssqlParameter).value as string] };
      return { records: [{ compatibility_level: 160 }] };
    };
    await assert.rejects(createDialect(scriptedDataSource(respond).dataSource, TABLES).schemaCheck(), (error: unknown) => {
      assert.ok(error instanceof QueueBoxConfigError);
      assert.equal(error.option, 'migrations');
      assert.match(
        error.message,
        /"queuebox_inbox" on SQL Server compares "idempotency_key", "aggregate_id" under the database's collation/,
      );
      assert.match(error.message, /Run migration QueueBoxKeyCollation1796083200000/);
      return true;
    });
    collations['[queuebox_inbox]'] = collations['[queuebox_inbox]'].map((c) => ({ ...c, collation: 'Latin1_General_100_BIN2' }));
    await createDialect(scriptedDataSource(respond).dataSource, TABLES).schemaCheck();
  });

  it("refuses keys, destinations and sources that end with a space (SQL Server's = ignores them), before any statement runs", async () => {
    const { dataSource, calls } = scriptedDataSource(() => ({ records: [{ id: '1' }] }));
    const dialect = createDialect(dataSource, TABLES);
    const row = { source: 'orders', idempotencyKey: 'e1', aggregateId: null, payloadJson: '{}', headersJson: '{}' };
    for (const [field, bad] of [
      ['idempotencyKey', { idempotencyKey: 'e1 ' }],
      ['source', { source: 'orders ' }],
      ['aggregateId', { aggregateId: 'a ' }],
    ] as const) {
      await assert.rejects(dialect.inboxInsertIfAbsent({ row: { ...row, ...bad } }), (error: unknown) => {
        assert.ok(error instanceof QueueBoxValidationError, String(error));
        assert.equal(error.field, field);
        assert.match(error.message, new RegExp(`InboxService.receive: "${field}" ends with a space`));
        return true;
      });
    }
    const caller = dataSource.createQueryRunner() as unknown as { manager: never };
    const message = { messageId: 'aaaaaaaa-0000-4000-8000-000000000000', payloadJson: '1', headersJson: '{}', availableAt: null };
    for (const [field, bad] of [
      ['destination', { destination: 'billing ', key: null }],
      ['key', { destination: 'billing', key: 'k ' }],
    ] as const) {
      await assert.rejects(
        dialect.outboxInsert({ manager: caller.manager, rows: [{ ...message, ...bad }] }),
        (error: unknown) => error instanceof QueueBoxValidationError && error.field === field,
      );
    }
    assert.deepEqual(
      calls.filter((c) => c.what === 'query'),
      [],
      'nothing was sent',
    );
    // Leading and inner spaces, and other trailing white space, compare exactly and pass.
    assert.deepEqual(await dialect.inboxInsertIfAbsent({ row: { ...row, idempotencyKey: ' e 1\t' } }), { id: '1', duplicate: false });
  });
});

describe('SQL Server dialect: schema through the migration class and plain SQL', () => {
  it('the migration class runs the SQL Server statements on an mssql connection', async () => {
    const tables = { outbox: 'messaging.events_out', inbox: 'messaging.events_in' };
    const ran: string[] = [];
    const queryRunner = { connection: { options: { type: 'mssql' } }, query: async (statement: string) => ran.push(statement) };
    await new (createQueueBoxMigration({ tables }))().up(queryRunner as never);
    assert.deepEqual(ran, schemaStatements('mssql', resolveTables(tables), 'up'));
    assert.ok(ran.includes("IF SCHEMA_ID(N'messaging') IS NULL EXEC(N'CREATE SCHEMA [messaging]')"));
  });

  it('the operations migration class runs the SQL Server operations statements', async () => {
    const tables = { outbox: 'messaging.events_out', inbox: 'messaging.events_in' };
    const ran: string[] = [];
    const queryRunner = { connection: { options: { type: 'mssql' } }, query: async (statement: string) => ran.push(statement) };
    await new (createQueueBoxOperationsMigration({ tables }))().up(queryRunner as never);
    assert.deepEqual(ran, schemaStatements('mssql', resolveTables(tables), 'up', 'operations'));
    assert.ok(ran.includes("CREATE INDEX [events_out_sent_idx] ON [messaging].[events_out] ([sent_at]) WHERE [state] = N'sent'"));
  });

  it('the key-collation migration class runs the SQL Server statements of 004, and nothing on PostgreSQL', async () => {
    const tables = { outbox: 'messaging.events_out', inbox: 'messaging.events_in' };
    for (const type of ['mssql', 'postgres'] as const) {
      const ran: string[] = [];
      const queryRunner = { connection: { options: { type } }, query: async (statement: string) => ran.push(statement) };
      const migration = new (createQueueBoxKeyCollationMigration({ tables }))();
      assert.equal(migration.name, 'QueueBoxKeyCollation1796083200000');
      await migration.up(queryRunner as never);
      await migration.down(queryRunner as never);
      assert.deepEqual(ran, [
        ...schemaStatements(type, resolveTables(tables), 'up', 'keyCollation'),
        ...schemaStatements(type, resolveTables(tables), 'down', 'keyCollation'),
      ]);
      assert.equal(ran.length > 0, type === 'mssql');
    }
    assert.match(renderSchemaSql('postgres', { migration: 'keyCollation' }), /Nothing to do on PostgreSQL/);
  });

  it('ships sql/sqlserver/001_queuebox, 002_queuebox_operations, 003_queuebox_claims, 004_queuebox_key_collation, 005_queuebox_claim_functions, 006_queuebox_instances, 007_queuebox_claim_probes and 008_queuebox_rate_limits and 009_queuebox_renewals .{up,down}.sql, one GO batch per statement', () => {
    const files = renderSchemaFiles().filter((file) => file.dir === 'sql/sqlserver');
    assert.deepEqual(
      files.map((file) => file.name),
      [
        '001_queuebox.up.sql',
        '001_queuebox.down.sql',
        '002_queuebox_operations.up.sql',
        '002_queuebox_operations.down.sql',
        '003_queuebox_claims.up.sql',
        '003_queuebox_claims.down.sql',
        '004_queuebox_key_collation.up.sql',
        '004_queuebox_key_collation.down.sql',
        '005_queuebox_claim_functions.up.sql',
        '005_queuebox_claim_functions.down.sql',
        '006_queuebox_instances.up.sql',
        '006_queuebox_instances.down.sql',
        '007_queuebox_claim_probes.up.sql',
        '007_queuebox_claim_probes.down.sql',
        '008_queuebox_rate_limits.up.sql',
        '008_queuebox_rate_limits.down.sql',
        '009_queuebox_renewals.up.sql',
        '009_queuebox_renewals.down.sql',
      ],
    );
    const up = renderSchemaSql('mssql');
    assert.equal(up.match(/^GO$/gm)?.length, schemaStatements('mssql', TABLES, 'up').length);
    assert.ok(up.startsWith('-- QueueBox schema (mssql, up)'));
  });
});

describe('SQL Server dialect: no claim functions, and nothing says so (issue 38, item 7)', () => {
  it("queuebox migrate's notes and the plain scripts of 005-007 speak of claim functions only as PostgreSQL's", () => {
    assert.deepEqual(migrationNotes('mssql', 'instances'), {
      applied: 'created the instances table and the claim owner columns.',
      notApplied: 'not applied: this version of QueueBox does not start until you run `queuebox migrate`',
    });
    assert.equal(migrationNotes('mssql', 'claimFunctions').applied, 'nothing to change on SQL Server (it has no claim functions).');
    assert.match(migrationNotes('postgres', 'instances').applied, /wrote the claim functions of this version/, 'PostgreSQL has them');
    for (const migration of ['claimFunctions', 'instances', 'claimProbes'] as const) {
      for (const direction of ['up', 'down'] as const) {
        const script = renderSchemaSql('mssql', { migration, direction });
        const mentions = script.split('\n').filter((line) => /claim functions/i.test(line));
        for (const line of mentions) assert.match(line, /PostgreSQL|no claim functions|no functions/, `${migration} ${direction}: ${line}`);
      }
    }
    assert.match(renderSchemaSql('mssql', { migration: 'instances' }), /^-- QueueBox instances and claim owners \(mssql, up\)/);
    assert.match(renderSchemaSql('mssql', { migration: 'claimFunctions' }), /^-- QueueBox claim functions, PostgreSQL only \(mssql, up\)/);
    assert.match(
      renderSchemaSql('postgres', { migration: 'instances' }),
      /^-- QueueBox instances, claim owners and claim functions \(postgres, up\)/,
    );
  });
});

describe('SQL Server dialect: how it drives TypeORM', () => {
  const claimedRow = {
    id: '12',
    message_id: 'A0B1C2D3-0000-4000-8000-00000000000F',
    destination: 'billing',
    key: 'k',
    payload: '{"total":5}',
    headers: '{"a":"b"}',
    attempts: 1,
    claim_token: 'DEADBEEF-0000-4000-8000-000000000001',
    lease_expires_at: new Date('2030-01-01T00:00:00Z'),
    created_at: new Date('2029-12-31T00:00:00Z'),
  };

  it('runs the outbox claim batch in a transaction on one QueryRunner, with typed parameters, and maps the rows', async () => {
    const { dataSource, calls } = scriptedDataSource(() => ({ records: [{ ...claimedRow, id: '13' }, claimedRow] }));
    const rows = await createDialect(dataSource, TABLES).outboxClaimBatch({ limit: 10, leaseMs: 60_000 });
    assert.deepEqual(
      calls.map((c) => [c.runner, c.what]),
      [
        [1, 'startTransaction'],
        [1, 'query'],
        [1, 'commitTransaction'],
        [1, 'release'],
      ],
    );
    assert.equal(calls[1].sql, sql.outboxClaimSql('[queuebox_outbox]'));
    assert.deepEqual(typed(calls[1].params), [
      ['nvarchar', 'queuebox_outbox_claim_queuebox_outbox', 255],
      ['int', 10],
      ['bigint', 60_000],
      ['uniqueidentifier', null],
    ]);
    assert.deepEqual(
      rows.map((r) => r.id),
      ['12', '13'],
      'sorted by id',
    );
    assert.equal(rows[0].message.messageId, 'a0b1c2d3-0000-4000-8000-00000000000f');
    assert.equal(rows[0].token, 'deadbeef-0000-4000-8000-000000000001');
    assert.deepEqual(rows[0].message.payload, { total: 5 });
    assert.deepEqual(rows[0].message.headers, { a: 'b', 'X-Message-Id': 'a0b1c2d3-0000-4000-8000-00000000000f' });
    assert.equal(rows[0].leaseExpiresAt.toISOString(), '2030-01-01T00:00:00.000Z');
  });

  it('a claim lock that was not granted is a clear error; a failed claim rolls back its transaction, which owns the lock', async () => {
    const { dataSource, calls } = scriptedDataSource((statement) => (isClaim(statement) ? sqlError(51001) : {}));
    await assert.rejects(
      createDialect(dataSource, TABLES).inboxRelayClaimBatch({ sources: ['orders'], limit: 5, leaseMs: 1000 }),
      (error: unknown) => {
        assert.ok(error instanceof QueueBoxError);
        assert.equal(error.code, 'QUEUEBOX_CLAIM_LOCK');
        assert.match(error.message, /"queuebox_inbox_claim_queuebox_inbox" was not granted within its wait \(sp_getapplock returned -1\)/);
        return true;
      },
    );
    assert.deepEqual(
      calls.map((c) => [c.runner, c.what]),
      [
        [1, 'startTransaction'],
        [1, 'query'],
        [1, 'rollbackTransaction'],
        [1, 'release'],
      ],
    );
    assert.deepEqual(typed(calls[1].params).slice(1), [
      ['int', 5],
      ['bigint', 1000],
      ['nvarchar', '["orders"]', 65535],
      ['uniqueidentifier', null],
    ]);
    for (const [number, fragment] of [
      [51002, 'returned -2 (the request was cancelled)'],
      [51003, 'returned -3 (chosen as a deadlock victim)'],
      [51999, 'returned -999 (a parameter or call error)'],
    ] as const) {
      const failing = scriptedDataSource((statement) => (isClaim(statement) ? sqlError(number) : {}));
      await assert.rejects(createDialect(failing.dataSource, TABLES).outboxClaimBatch({ limit: 1, leaseMs: 1000 }), (error: unknown) =>
        (error as Error).message.includes(fragment),
      );
    }
    const other = scriptedDataSource((statement) => (isClaim(statement) ? sqlError(1205) : {}));
    await assert.rejects(createDialect(other.dataSource, TABLES).outboxClaimBatch({ limit: 1, leaseMs: 1000 }), /SQL Server error 1205/);
  });

  it('runs the pull claim in a transaction that owns the lock on the source', async () => {
    const { dataSource, calls } = scriptedDataSource(() => ({ records: [] }));
    const instanceId = '4b1a7c1e-0000-4000-8000-000000000001';
    await createDialect(dataSource, TABLES, { instance: { id: instanceId } }).inboxPullClaimBatch({
      source: 'payments',
      limit: 3,
      leaseMs: 30_000,
    });
    assert.deepEqual(
      calls.map((c) => c.what),
      ['startTransaction', 'query', 'commitTransaction', 'release'],
    );
    assert.equal(calls[1].sql, sql.inboxPullClaimSql('[queuebox_inbox]'));
    assert.deepEqual(typed(calls[1].params), [
      ['nvarchar', 'queuebox_pull_claim_queuebox_inbox:payments', 255],
      ['int', 3],
      ['bigint', 30_000],
      ['nvarchar', 'payments', 255],
      ['uniqueidentifier', instanceId],
    ]);
    const failing = scriptedDataSource(() => sqlError(51001));
    await assert.rejects(
      createDialect(failing.dataSource, TABLES).inboxPullClaimBatch({ source: 'payments', limit: 1, leaseMs: 1000 }),
      /"queuebox_pull_claim_queuebox_inbox:payments" was not granted/,
    );
    assert.deepEqual(
      failing.calls.map((c) => c.what),
      ['startTransaction', 'query', 'rollbackTransaction', 'release'],
    );
  });

  it('fences with a BIGINT id and a UNIQUEIDENTIFIER token, and joins the caller transaction', async () => {
    const { dataSource, calls } = scriptedDataSource(() => ({ affected: 1 }));
    const dialect = createDialect(dataSource, TABLES);
    const fence = { table: 'inbox' as const, id: '7', token: '0f0e0d0c-0000-4000-8000-000000000000' };
    assert.equal(await dialect.leaseComplete(fence), true);
    assert.equal(calls[0].sql, sql.leaseCompleteSql('[queuebox_inbox]', { state: 'processed', column: 'processed_at' }));
    assert.deepEqual(typed(calls[0].params), [
      ['bigint', '7'],
      ['uniqueidentifier', fence.token],
    ]);
    assert.equal(await dialect.leaseRetry({ ...fence, delayMs: 5000, error: 'boom' }), true);
    const retry = calls.filter((c) => c.what === 'query').at(-1);
    assert.deepEqual(typed(retry?.params).slice(2), [
      ['bigint', 5000],
      ['nvarchar', 'boom', 65535],
    ]);
    const caller = dataSource.createQueryRunner() as unknown as { id: number; manager: never };
    const before = calls.length;
    assert.equal(await dialect.leaseComplete({ ...fence, manager: caller.manager }), true);
    assert.deepEqual(
      calls.slice(before).map((c) => [c.runner, c.what]),
      [[caller.id, 'query']],
      "the statement ran on the caller's runner, which it did not release",
    );
  });

  it('inbox insert: no row back is a duplicate, looked up in the same transaction; an error of the insert reaches the caller (issue 38 M3)', async () => {
    const { dataSource, calls } = scriptedDataSource((statement) =>
      statement === sql.inboxInsertSql('[queuebox_inbox]') ? { records: [] } : { records: [{ id: '41' }] },
    );
    const row = { source: 'orders', idempotencyKey: 'e1', aggregateId: null, payloadJson: '{}', headersJson: '{}' };
    const caller = dataSource.createQueryRunner() as unknown as { id: number; manager: never; startTransaction(): Promise<void> };
    await caller.startTransaction();
    assert.deepEqual(await createDialect(dataSource, TABLES).inboxInsertIfAbsent({ row, manager: caller.manager }), {
      id: '41',
      duplicate: true,
    });
    assert.deepEqual(
      calls.filter((c) => c.what === 'query').map((c) => [c.runner, c.sql === sql.inboxInsertSql('[queuebox_inbox]') ? 'insert' : 'find']),
      [
        [caller.id, 'insert'],
        [caller.id, 'find'],
      ],
    );
    // The batch catches the unique violations itself; what it lets through (a transaction it cannot keep, any other error) is the caller's.
    for (const number of [547, 2627]) {
      const failing = scriptedDataSource(() => sqlError(number));
      await assert.rejects(
        createDialect(failing.dataSource, TABLES).inboxInsertIfAbsent({ row }),
        new RegExp(`SQL Server error ${number}`),
      );
    }
  });

  it('the batch insert sends every row in one JSON parameter and returns ids in input order', async () => {
    const { dataSource, calls } = scriptedDataSource(() => ({
      records: [
        { id: '2', message_id: 'BBBBBBBB-0000-4000-8000-000000000000' },
        { id: '1', message_id: 'AAAAAAAA-0000-4000-8000-000000000000' },
      ],
    }));
    const caller = dataSource.createQueryRunner() as unknown as { manager: never };
    const at = new Date('2030-05-06T07:08:09.010Z');
    const result = await createDialect(dataSource, TABLES).outboxInsert({
      manager: caller.manager,
      rows: [
        {
          messageId: 'aaaaaaaa-0000-4000-8000-000000000000',
          destination: 'd',
          key: null,
          payloadJson: '1',
          headersJson: '{}',
          availableAt: at,
        },
        {
          messageId: 'bbbbbbbb-0000-4000-8000-000000000000',
          destination: 'd',
          key: 'k',
          payloadJson: '"x"',
          headersJson: '{}',
          availableAt: null,
        },
      ],
    });
    assert.deepEqual(
      result.map((r) => r.id),
      ['1', '2'],
    );
    const [json] = typed(calls.at(-1)?.params) as [[string, string]];
    assert.equal(json[0], 'nvarchar');
    assert.deepEqual(JSON.parse(json[1]), [
      {
        messageId: 'aaaaaaaa-0000-4000-8000-000000000000',
        destination: 'd',
        key: null,
        payload: '1',
        headers: '{}',
        availableAt: at.toISOString(),
      },
      { messageId: 'bbbbbbbb-0000-4000-8000-000000000000', destination: 'd', key: 'k', payload: '"x"', headers: '{}', availableAt: null },
    ]);
  });

  it("onDuplicate: 'ignore': skips held ids in the insert, reads their rows after it in the caller's transaction, in input order", async () => {
    const held = 'aaaaaaaa-0000-4000-8000-000000000000';
    const fresh = 'bbbbbbbb-0000-4000-8000-000000000000';
    const { dataSource, calls } = scriptedDataSource((statement) => {
      if (statement === sql.outboxInsertIfAbsentSql('[queuebox_outbox]'))
        return { records: [{ id: '9', message_id: fresh.toUpperCase() }] };
      if (statement === sql.outboxFindSql('[queuebox_outbox]')) return { records: [{ id: '3', message_id: held.toUpperCase() }] };
      return new Error(`unexpected statement ${statement.slice(0, 40)}`);
    });
    const caller = dataSource.createQueryRunner() as unknown as { id: number; manager: never };
    const row = (messageId: string) => ({ messageId, destination: 'd', key: null, payloadJson: '1', headersJson: '{}', availableAt: null });
    const result = await createDialect(dataSource, TABLES).outboxInsert({
      manager: caller.manager,
      rows: [row(held), row(fresh)],
      ifAbsent: true,
    });
    assert.deepEqual(result, [
      { messageId: held, id: '3', duplicate: true },
      { messageId: fresh, id: '9', duplicate: false },
    ]);
    const queries = calls.filter((c) => c.what === 'query');
    assert.deepEqual(
      queries.map((c) => [c.runner, c.sql]),
      [
        [caller.id, sql.outboxInsertIfAbsentSql('[queuebox_outbox]')],
        [caller.id, sql.outboxFindSql('[queuebox_outbox]')],
      ],
    );
    assert.deepEqual(typed(queries[1].params), [['nvarchar', JSON.stringify([held]), 65535]]);
  });
});

describe('SQL Server dialect: admin instants in UTC whatever the Node time zone (issue 14, item 4)', () => {
  it('sends deadAfter/deadBefore as ISO-8601 UTC text under TZ=Europe/Berlin, and the statement reads them as UTC', () => {
    // A child process, so the time zone is Berlin's from the start (Node reads TZ once).
    const child = `
      const { createDialect } = require(${JSON.stringify(join(__dirname, '../../lib/core/create-dialect.js'))});
      const { resolveTables } = require(${JSON.stringify(join(__dirname, '../../lib/options/options.resolver.js'))});
      const sent = [];
      const runner = { isReleased: false, query: async (_sql, params) => { sent.push(params); return { records: [{ n: '0' }] }; }, release: async () => {} };
      const dataSource = { options: { type: 'mssql' }, createQueryRunner: () => runner };
      const dialect = createDialect(dataSource, resolveTables(undefined));
      const selection = { component: 'outbox', name: null, errorContains: null, ids: null,
        deadAfter: new Date('2030-03-31T00:30:00.000Z'), deadBefore: new Date('2030-07-01T12:00:00.000Z') };
      dialect.deadLetterCount({ selection }).then(() => {
        process.stdout.write(JSON.stringify({ offset: new Date('2030-07-01T12:00:00Z').getTimezoneOffset(),
          params: sent[0].map((p) => [p.type, p.value, ...p.params.filter((x) => x !== undefined)]) }));
      });`;
    const out = execFileSync(process.execPath, ['-e', child], { env: { ...process.env, TZ: 'Europe/Berlin' }, encoding: 'utf8' });
    const { offset, params } = JSON.parse(out);
    assert.equal(offset, -120, 'the child ran in Berlin summer time');
    assert.deepEqual(params.slice(2, 4), [
      ['nvarchar', '2030-03-31T00:30:00.000Z', 30],
      ['nvarchar', '2030-07-01T12:00:00.000Z', 30],
    ]);
    const statement = sql.deadLetterCountSql('[queuebox_outbox]', 'outbox');
    assert.match(
      statement,
      /COALESCE\(\[claimed_at\], \[created_at\]\) >= CAST\(SWITCHOFFSET\(CAST\(@2 AS DATETIMEOFFSET\), '\+00:00'\) AS DATETIME2\)/,
    );
    assert.match(
      statement,
      /COALESCE\(\[claimed_at\], \[created_at\]\) < CAST\(SWITCHOFFSET\(CAST\(@3 AS DATETIMEOFFSET\), '\+00:00'\) AS DATETIME2\)/,
    );
  });
});

describe('SQL Server dialect: READ COMMITTED pinned (issue 14, item 5)', () => {
  it('every claim transaction, the retention lock transaction and each retention delete run READ COMMITTED, whatever the DataSource says', async () => {
    const { dataSource, calls } = scriptedDataSource((statement) =>
      statement === sql.retentionTryLockSql() ? { records: [{ granted: 0 }] } : { records: [], affected: 2 },
    );
    (dataSource.options as { isolationLevel?: string }).isolationLevel = 'SERIALIZABLE';
    const dialect = createDialect(dataSource, TABLES);
    await dialect.outboxClaimBatch({ limit: 1, leaseMs: 1000 });
    await dialect.inboxRelayClaimBatch({ sources: ['orders'], limit: 1, leaseMs: 1000 });
    await dialect.inboxPullClaimBatch({ source: 'orders', limit: 1, leaseMs: 1000 });
    const deleted = await dialect.retentionWithLock(() =>
      dialect.retentionDeleteBatch({ kind: 'outbox-sent', olderThanMs: 1000, limit: 10 }),
    );
    assert.equal(deleted, 2);
    const starts = calls.filter((c) => c.what === 'startTransaction');
    assert.equal(starts.length, 5, 'three claims, the retention lock, one delete');
    assert.deepEqual(
      starts.map((c) => c.isolation),
      Array(5).fill('READ COMMITTED'),
    );
    const deleteCall = calls.find((c) => c.sql?.includes('DELETE TOP'));
    assert.ok(deleteCall && starts.some((c) => c.runner === deleteCall.runner), 'the delete ran in its own pinned transaction');
  });
});

describe("SQL Server dialect: QueueBox's own transactions begin READ COMMITTED, whatever the DataSource says (issue 24, item 8)", () => {
  it('a pull completion or relay forward at SNAPSHOT or SERIALIZABLE would fail its fence with error 3960 after a renewal: transaction() names READ COMMITTED', async () => {
    for (const level of ['SNAPSHOT', 'SERIALIZABLE', 'REPEATABLE READ', 'READ UNCOMMITTED']) {
      const { dataSource, calls } = scriptedDataSource(() => ({ records: [], affected: 1 }));
      (dataSource.options as { isolationLevel?: string }).isolationLevel = level;
      const dialect = createDialect(dataSource, TABLES);
      const fence = { table: 'inbox' as const, id: '7', token: '0f0e0d0c-0000-4000-8000-000000000000' };
      const result = await dialect.transaction(async (manager) => {
        assert.equal(await dialect.leaseComplete({ ...fence, manager }), true);
        return 'done';
      });
      assert.equal(result, 'done');
      assert.deepEqual(
        calls.map((c) => [c.runner, c.what, c.isolation ?? c.pinned]),
        [
          [1, 'startTransaction', 'READ COMMITTED'],
          [1, 'query', false],
          [1, 'commitTransaction', undefined],
          [1, 'release', undefined],
        ],
        `DataSource isolationLevel ${level}: the transaction begins READ COMMITTED and the completion joins it`,
      );
    }
  });
});

describe('SQL Server dialect: statements outside a transaction run READ COMMITTED, whatever level the pooled connection was left at (issue 26, isolation)', () => {
  it('pins READ COMMITTED in every batch sent outside a transaction, and leaves a caller transaction at its own level', async () => {
    const { dataSource, calls } = scriptedDataSource((statement) => {
      if (statement === sql.inboxInsertSql('[queuebox_inbox]')) return { records: [{ id: '1' }] };
      if (statement === sql.deadLetterCountSql('[queuebox_outbox]', 'outbox')) return { records: [{ n: '0' }] };
      if (statement === sql.clockNowSql()) return { records: [{ now: new Date() }] };
      return { records: [], affected: 1 };
    });
    (dataSource.options as { isolationLevel?: string }).isolationLevel = 'SNAPSHOT';
    const dialect = createDialect(dataSource, TABLES);
    const fence = { table: 'inbox' as const, id: '7', token: '0f0e0d0c-0000-4000-8000-000000000000' };
    const heads = [{ id: '3', source: 's', aggregateId: 'a' }];
    const row = { source: 's', idempotencyKey: 'e', aggregateId: null, payloadJson: '{}', headersJson: '{}' };
    // A connected runner without a transaction (the pull workers' renewal connection): TypeORM sends its statements to the pool.
    const renewal = dataSource.createQueryRunner() as unknown as { manager: never };
    const outside: [string, () => Promise<unknown>][] = [
      ['leaseRenew', () => dialect.leaseRenew({ ...fence, leaseMs: 1000 })],
      ['leaseRenew on the renewal connection', () => dialect.leaseRenew({ ...fence, leaseMs: 1000, manager: renewal.manager })],
      ['leaseComplete', () => dialect.leaseComplete(fence)],
      ['leaseCompleteBatch', () => dialect.leaseCompleteBatch({ table: 'outbox', claims: [{ id: '7', token: fence.token }] })],
      ['leaseRetry', () => dialect.leaseRetry({ ...fence, delayMs: 1, error: 'e' })],
      ['leaseDeadLetter', () => dialect.leaseDeadLetter({ ...fence, reason: 'r' })],
      ['leaseRelease', () => dialect.leaseRelease(fence)],
      ['outboxReclaim', () => dialect.outboxReclaim({ maxAttempts: 3 })],
      ['inboxReclaim', () => dialect.inboxReclaim({ sources: ['s'], maxAttempts: 3 })],
      ['inboxFollowers (the relay)', () => dialect.inboxFollowers({ heads, perHead: 5 })],
      ['inboxInsertIfAbsent (receive without a manager)', () => dialect.inboxInsertIfAbsent({ row })],
      [
        'deadLetterCount',
        () =>
          dialect.deadLetterCount({
            selection: { component: 'outbox', name: null, errorContains: null, deadAfter: null, deadBefore: null, ids: null, key: null },
          }),
      ],
      ['blockedKeySkipHead', () => dialect.blockedKeySkipHead({ component: 'outbox', key: 'k', reason: 'r' })],
      ['adminClaimList', () => dialect.adminClaimList({ component: 'inbox', limit: 5 })],
      ['clockNow', () => dialect.clockNow()],
    ];
    for (const [method, call] of outside) {
      const before = calls.length;
      await call();
      const sent = calls.slice(before).filter((c) => c.what === 'query');
      assert.equal(sent.length, 1, method);
      assert.equal(sent[0].pinned, true, `${method}: sent after SET TRANSACTION ISOLATION LEVEL READ COMMITTED`);
    }
    assert.equal(lease.PINNED_READ_COMMITTED, 'SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\n');
    // In a caller's transaction the statement joins it at the level that transaction has (the caller's choice).
    const caller = dataSource.createQueryRunner() as unknown as { manager: never; startTransaction(): Promise<void> };
    await caller.startTransaction();
    const inside: [string, () => Promise<unknown>][] = [
      ['leaseComplete', () => dialect.leaseComplete({ ...fence, manager: caller.manager })],
      ['inboxFollowers (a batch pull handler)', () => dialect.inboxFollowers({ heads, perHead: 5, manager: caller.manager })],
      [
        'inboxCompleteFollowers',
        () => dialect.inboxCompleteFollowers({ followers: [{ id: '4', headId: '3', headToken: fence.token }], manager: caller.manager }),
      ],
      ['inboxInsertIfAbsent (receive in a transaction)', () => dialect.inboxInsertIfAbsent({ row, manager: caller.manager })],
    ];
    for (const [method, call] of inside) {
      const before = calls.length;
      await call();
      const sent = calls.slice(before).filter((c) => c.what === 'query');
      assert.equal(sent.length, 1, method);
      assert.equal(sent[0].pinned, false, `${method}: not pinned in the caller's transaction`);
    }
    // Claims and retention pin theirs by beginning their own transaction at READ COMMITTED.
    const before = calls.length;
    await dialect.outboxClaimBatch({ limit: 1, leaseMs: 1000 });
    assert.deepEqual(
      calls.slice(before).map((c) => [c.what, c.isolation ?? c.pinned]),
      [
        ['startTransaction', 'READ COMMITTED'],
        ['query', false],
        ['commitTransaction', undefined],
        ['release', undefined],
      ],
    );
  });
});

describe('SQL Server dialect: payload text reaches OPENJSON exactly (issue 26)', () => {
  it('sends a payload and headers holding quotes and backslashes as JSON string values that decode to their text exactly', async () => {
    const { dataSource, calls } = scriptedDataSource(() => ({
      records: [{ id: '1', message_id: 'AAAAAAAA-0000-4000-8000-000000000000' }],
    }));
    const caller = dataSource.createQueryRunner() as unknown as { manager: never };
    const payload = {
      'we"ird\\key': 'a "quoted" \\ back\\slash \\"both\\" \\\\ two \\n not a newline\nreal newline \u0001 \u2028 zäh 💡 </script>',
    };
    const headers = { 'X-Q': 'say "hi" \\ bye' };
    const payloadJson = JSON.stringify(payload);
    const headersJson = JSON.stringify(headers);
    await createDialect(dataSource, TABLES).outboxInsert({
      manager: caller.manager,
      rows: [
        { messageId: 'aaaaaaaa-0000-4000-8000-000000000000', destination: 'd', key: null, payloadJson, headersJson, availableAt: null },
      ],
    });
    const [[type, text]] = typed(calls.at(-1)?.params) as [[string, string]];
    assert.equal(type, 'nvarchar');
    // OPENJSON ... WITH ([payload] NVARCHAR(MAX) '$.payload') returns the string value unescaped: JSON.parse says what that is.
    const [sent] = JSON.parse(text);
    assert.equal(sent.payload, payloadJson, 'the payload text, exactly');
    assert.equal(sent.headers, headersJson);
    assert.deepEqual(JSON.parse(sent.payload), payload);
  });
});

describe('SQL Server dialect: every parameter declared at a fixed size (issue 14, item 6)', () => {
  // What tedious declares for a parameter (sp_executesql's parameter list), from the type and
  // length TypeORM hands to mssql. An unsized NVARCHAR is declared at its value's length, so each
  // distinct length would compile a plan of its own.
  const TEDIOUS_TYPE: Record<string, keyof typeof TYPES> = {
    nvarchar: 'NVarChar',
    bigint: 'BigInt',
    int: 'Int',
    uniqueidentifier: 'UniqueIdentifier',
  };
  const declared = (p: unknown, value?: unknown) => {
    assert.ok(p instanceof MssqlParameter, `an untyped parameter was sent: ${JSON.stringify(p)}`);
    const type = TEDIOUS_TYPE[p.type];
    assert.ok(type, `unexpected parameter type ${p.type}`);
    return TYPES[type].declaration({ value: value === undefined ? p.value : value, length: p.params[0] } as never);
  };

  it('every statement the dialect sends declares each parameter by its column, whatever the values', async () => {
    const { dataSource, calls } = scriptedDataSource((statement) => {
      if (statement === sql.retentionTryLockSql()) return { records: [{ granted: 0 }] };
      if (statement === sql.deadLetterCountSql('[queuebox_outbox]', 'outbox')) return { records: [{ n: '0' }] };
      if (statement === sql.inboxInsertSql('[queuebox_inbox]')) return { records: [{ id: '1' }] };
      if (statement === sql.outboxInsertSql('[queuebox_outbox]'))
        return { records: [{ id: '1', message_id: 'AAAAAAAA-0000-4000-8000-000000000000' }] };
      if (statement === sql.outboxInsertIfAbsentSql('[queuebox_outbox]'))
        return { records: [{ id: '1', message_id: 'AAAAAAAA-0000-4000-8000-000000000000' }] };
      if (statement === instances.instanceRegisterSql('[queuebox_instances]')) return { records: [{ registered: 1 }] };
      if (statement === instances.instanceHeartbeatSql('[queuebox_instances]')) return { records: [{ beats: '4', registered: 1 }] };
      return { records: [], affected: 1 };
    });
    const dialect = createDialect(dataSource, TABLES);
    const caller = dataSource.createQueryRunner() as unknown as { manager: never };
    const fence = { table: 'outbox' as const, id: '7', token: '0f0e0d0c-0000-4000-8000-000000000000' };
    const selection = {
      component: 'outbox' as const,
      name: 'billing',
      errorContains: 'boom',
      deadAfter: new Date(0),
      deadBefore: new Date(1),
      ids: ['1', '2'],
      key: 'customer-1',
    };
    const N255 = 'nvarchar(255)';
    const MAX = 'nvarchar(max)';
    const expected: [string, () => Promise<unknown>, string[]][] = [
      [
        'outboxInsert',
        () =>
          dialect.outboxInsert({
            manager: caller.manager,
            rows: [
              {
                messageId: 'aaaaaaaa-0000-4000-8000-000000000000',
                destination: 'd',
                key: 'k',
                payloadJson: '1',
                headersJson: '{}',
                availableAt: null,
              },
            ],
          }),
        [MAX],
      ],
      [
        'outboxInsert (ifAbsent; its lookup of skipped ids is declared as the insert is, see the test of onDuplicate above)',
        () =>
          dialect.outboxInsert({
            manager: caller.manager,
            rows: [
              {
                messageId: 'aaaaaaaa-0000-4000-8000-000000000000',
                destination: 'd',
                key: 'k',
                payloadJson: '1',
                headersJson: '{}',
                availableAt: null,
              },
            ],
            ifAbsent: true,
          }),
        [MAX],
      ],
      ['outboxClaimBatch', () => dialect.outboxClaimBatch({ limit: 5, leaseMs: 1000 }), [N255, 'int', 'bigint', 'uniqueidentifier']],
      ['outboxReclaim', () => dialect.outboxReclaim({ maxAttempts: 3 }), ['int']],
      [
        'inboxInsertIfAbsent',
        () =>
          dialect.inboxInsertIfAbsent({
            row: { source: 's', idempotencyKey: 'e', aggregateId: null, payloadJson: '{}', headersJson: '{}' },
          }),
        [N255, N255, N255, MAX, MAX],
      ],
      [
        'inboxRelayClaimBatch',
        () => dialect.inboxRelayClaimBatch({ sources: ['a'], limit: 5, leaseMs: 1000 }),
        [N255, 'int', 'bigint', MAX, 'uniqueidentifier'],
      ],
      ['inboxReclaim', () => dialect.inboxReclaim({ sources: ['a'], maxAttempts: 3 }), ['int', MAX]],
      [
        'inboxPullClaimBatch',
        () => dialect.inboxPullClaimBatch({ source: 'a', limit: 5, leaseMs: 1000 }),
        [N255, 'int', 'bigint', N255, 'uniqueidentifier'],
      ],
      ['inboxFollowers', () => dialect.inboxFollowers({ heads: [{ id: '3', source: 's', aggregateId: 'a' }], perHead: 5 }), [MAX, 'int']],
      [
        'inboxCompleteFollowers',
        () => dialect.inboxCompleteFollowers({ followers: [{ id: '4', headId: '3', headToken: fence.token }], manager: caller.manager }),
        [MAX],
      ],
      ['leaseRenew', () => dialect.leaseRenew({ ...fence, leaseMs: 1000 }), ['bigint', 'uniqueidentifier', 'bigint']],
      ['leaseComplete', () => dialect.leaseComplete(fence), ['bigint', 'uniqueidentifier']],
      ['leaseCompleteBatch', () => dialect.leaseCompleteBatch({ table: 'outbox', claims: [{ id: '7', token: fence.token }] }), [MAX]],
      ['leaseRelease', () => dialect.leaseRelease(fence), ['bigint', 'uniqueidentifier']],
      ['leaseRetry', () => dialect.leaseRetry({ ...fence, delayMs: 5, error: 'x' }), ['bigint', 'uniqueidentifier', 'bigint', MAX]],
      ['leaseDeadLetter', () => dialect.leaseDeadLetter({ ...fence, reason: 'x' }), ['bigint', 'uniqueidentifier', MAX]],
      [
        'deadLetterList',
        () => dialect.deadLetterList({ selection, afterId: null, limit: 5, includePayload: false }),
        [N255, MAX, 'nvarchar(30)', 'nvarchar(30)', MAX, N255, 'bigint', 'int'],
      ],
      ['deadLetterCount', () => dialect.deadLetterCount({ selection }), [N255, MAX, 'nvarchar(30)', 'nvarchar(30)', MAX, N255]],
      [
        'deadLetterReplay',
        () => dialect.deadLetterReplay({ selection, afterId: '3', limit: 5 }),
        [N255, MAX, 'nvarchar(30)', 'nvarchar(30)', MAX, N255, 'bigint', 'int'],
      ],
      ['blockedKeyList', () => dialect.blockedKeyList({ component: 'inbox', limit: 5 }), ['int']],
      ['adminClaimList', () => dialect.adminClaimList({ component: 'inbox', limit: 5 }), ['int']],
      [
        'blockedKeySkipHead outbox',
        () => dialect.blockedKeySkipHead({ component: 'outbox', key: 'k', reason: 'r' }),
        [N255, 'bigint', MAX],
      ],
      [
        'blockedKeySkipHead inbox',
        () => dialect.blockedKeySkipHead({ component: 'inbox', source: 's', aggregateId: 'a', headId: '4', reason: 'r' }),
        [N255, N255, 'bigint', MAX],
      ],
      ['retentionWithLock', () => dialect.retentionWithLock(async () => 0), [N255]],
      ['retentionDeleteBatch', () => dialect.retentionDeleteBatch({ kind: 'outbox-sent', olderThanMs: 1000, limit: 5 }), ['bigint', 'int']],
      [
        'instanceRegister',
        () =>
          dialect.instanceRegister({ id: fence.token, host: 'h', pid: 7, dataSource: 'default', version: '1.0.0', deadAfterMs: 15_000 }),
        ['uniqueidentifier', N255, 'int', N255, N255, 'int'],
      ],
      [
        'instanceHeartbeat',
        () => dialect.instanceHeartbeat({ id: fence.token, beats: { from: 3, to: 5 } }),
        ['uniqueidentifier', 'bigint', 'bigint'],
      ],
      ['instanceEndDead', () => dialect.instanceEndDead({ self: fence.token, unregisteredAfterMs: 15_000 }), ['int', 'uniqueidentifier']],
      ['instanceDeregister', () => dialect.instanceDeregister({ id: fence.token }), ['uniqueidentifier']],
      ['instanceList', () => dialect.instanceList(), []],
    ];
    for (const [method, call, types] of expected) {
      const before = calls.length;
      await call();
      const sent = calls.slice(before).filter((c) => c.what === 'query');
      assert.equal(sent.length, 1, `${method}: one statement`);
      const params = sent[0].params ?? [];
      assert.deepEqual(
        params.map((p) => declared(p)),
        types,
        method,
      );
      for (const p of params) {
        if ((p as MssqlParameter).type !== 'nvarchar') continue;
        for (const other of [null, '', 'x'.repeat(17), 'y'.repeat(5000)]) {
          assert.equal(declared(p, other), declared(p), `${method}: the declaration does not depend on the value`);
        }
      }
    }
    const rowStates = rowStatesQuery('mssql', TABLES.outbox, ['1', '2']);
    assert.deepEqual(
      rowStates.params.map((p) => declared(p)),
      [MAX],
      'queuebox/testing and the CLI send typed parameters too',
    );
  });
});

describe('SQL Server: renewals cannot starve behind a full pool (issue 14, item 7)', () => {
  // TypeORM's SQL Server driver reserves no connection outside a transaction, so the pull
  // workers' renewal connection is not set aside there: start-up refuses a pool that handler
  // transactions and waiting claims could fill.
  const check = (p: {
    type: 'mssql' | 'postgres';
    poolMax: number;
    handlers: number[];
    outbox?: boolean;
    relay?: boolean;
    retention?: boolean;
  }) => {
    const dialect =
      p.type === 'mssql'
        ? createDialect(mssqlDataSource(), TABLES)
        : ({ type: 'postgres', reservesConnections: true, workListen: () => {} } as never);
    const options = {
      workers: { outbox: p.outbox ?? true, relay: p.relay ?? true, pull: true },
      retention: { enabled: p.retention ?? false },
    } as never;
    const dataSource = {
      options: p.type === 'mssql' ? { type: 'mssql', pool: { max: p.poolMax } } : { type: 'postgres', poolSize: p.poolMax },
    };
    const explorer = { handlers: p.handlers.map((concurrency) => ({ concurrency })) } as never;
    return () => new QueueBoxPoolCheck(options, dataSource as never, dialect, explorer).onModuleInit();
  };

  it('refuses pool.max below the handlers’ concurrency + one per claim loop + one for renewals, naming pool.max', () => {
    assert.equal(createDialect(mssqlDataSource(), TABLES).reservesConnections, false);
    // Handlers 4 + 2, claim loops: outbox, relay and one per handler (4), renewals 1: 11.
    assert.throws(check({ type: 'mssql', poolMax: 10, handlers: [4, 2] }), (error: unknown) => {
      assert.ok(error instanceof QueueBoxConfigError, String(error));
      assert.equal(error.option, 'pool.max');
      assert.match(
        error.message,
        /"pool\.max"\) has 10 connection.*at least 11 \(6 for the pull handlers' transactions.*4 for the claim loops; 1 for renewals\)/,
      );
      return true;
    });
    assert.doesNotThrow(check({ type: 'mssql', poolMax: 11, handlers: [4, 2] }));
    // Without the outbox and relay workers, two claim loops fewer.
    assert.doesNotThrow(check({ type: 'mssql', poolMax: 9, handlers: [4, 2], outbox: false, relay: false }));
    assert.throws(check({ type: 'mssql', poolMax: 8, handlers: [4, 2], outbox: false, relay: false }), /at least 9/);
  });

  it('counts what retention holds, its lock and one delete batch, when it is enabled (issue 26 N7)', () => {
    // 11 as above, + 2 for retention: 13.
    assert.throws(check({ type: 'mssql', poolMax: 12, handlers: [4, 2], retention: true }), (error: unknown) => {
      assert.ok(error instanceof QueueBoxConfigError, String(error));
      assert.equal(error.option, 'pool.max');
      assert.match(
        error.message,
        /at least 13 \(6 for the pull handlers' transactions.*4 for the claim loops; 2 for retention, its lock and one delete batch; 1 for renewals\)/,
      );
      return true;
    });
    assert.doesNotThrow(check({ type: 'mssql', poolMax: 13, handlers: [4, 2], retention: true }));
  });

  it('PostgreSQL, whose renewal connection is set aside, keeps its own minimum (a warning above it); no pull handler, no rule', () => {
    assert.doesNotThrow(check({ type: 'postgres', poolMax: 4, handlers: [4, 2] }));
    assert.doesNotThrow(check({ type: 'mssql', poolMax: 2, handlers: [] }));
  });
});

describe('SQL Server dialect: admin keys sized to their columns, and every error of a failed request (issue 14, item 8 c, d)', () => {
  it('(c) refuses an admin name, key, source or aggregate longer than its 255-character column, naming the field; 255 is sent as NVARCHAR(255)', async () => {
    const { dataSource, calls } = scriptedDataSource(() => ({ records: [{ n: '0' }] }));
    const dialect = createDialect(dataSource, TABLES);
    const long = 'k'.repeat(256);
    const selection = {
      component: 'outbox' as const,
      name: long,
      errorContains: null,
      deadAfter: null,
      deadBefore: null,
      ids: null,
      key: null,
    };
    const refused = (field: string) => (error: unknown) => {
      assert.ok(error instanceof QueueBoxValidationError, String(error));
      assert.equal(error.field, field);
      assert.equal(error.code, 'QUEUEBOX_ADMIN_ARGUMENT');
      assert.match(error.message, new RegExp(`"${field}" is 256 characters long.*at most 255`));
      return true;
    };
    await assert.rejects(dialect.deadLetterCount({ selection }), refused('name'));
    await assert.rejects(dialect.deadLetterList({ selection, afterId: null, limit: 1, includePayload: false }), refused('name'));
    await assert.rejects(dialect.deadLetterReplay({ selection, afterId: null, limit: 1 }), refused('name'));
    await assert.rejects(dialect.deadLetterCount({ selection: { ...selection, name: 'billing', key: long } }), refused('key'));
    await assert.rejects(dialect.blockedKeySkipHead({ component: 'outbox', key: long, reason: 'r' }), refused('key'));
    await assert.rejects(
      dialect.blockedKeySkipHead({ component: 'inbox', source: long, aggregateId: 'a', reason: 'r' }),
      refused('source'),
    );
    await assert.rejects(
      dialect.blockedKeySkipHead({ component: 'inbox', source: 's', aggregateId: long, reason: 'r' }),
      refused('aggregateId'),
    );
    assert.deepEqual(
      calls.filter((c) => c.what === 'query'),
      [],
      'nothing was sent',
    );
    await dialect.deadLetterCount({ selection: { ...selection, name: 'k'.repeat(255) } });
    assert.deepEqual(typed(calls.at(-2)?.params)[0], ['nvarchar', 'k'.repeat(255), 255]);
  });

  // As mssql reports a request whose transaction was rolled back by an earlier error: the last
  // error (266) is thrown, the real one is in precedingErrors; TypeORM's QueryFailedError copies both.
  const mismatch = (preceding: { number: number; message: string }) =>
    new QueryFailedError(
      'UPDATE ...',
      [],
      Object.assign(
        new Error(
          'Transaction count after EXECUTE indicates a mismatching number of BEGIN and COMMIT statements. Previous count = 1, current count = 0.',
        ),
        { number: 266, precedingErrors: [Object.assign(new Error(preceding.message), { number: preceding.number })] },
      ),
    );

  it('(d) a failed request names the errors before its last one in the error QueueBox throws', async () => {
    const { dataSource } = scriptedDataSource(() =>
      mismatch({ number: 547, message: 'The UPDATE statement conflicted with the CHECK constraint "x".' }),
    );
    const dialect = createDialect(dataSource, TABLES);
    const fence = { table: 'outbox' as const, id: '7', token: '0f0e0d0c-0000-4000-8000-000000000000' };
    await assert.rejects(dialect.leaseRetry({ ...fence, delayMs: 1, error: 'e' }), (error: unknown) => {
      assert.ok(error instanceof QueryFailedError, 'the error keeps its class');
      assert.match(
        error.message,
        /mismatching number of BEGIN and COMMIT.*\(preceded by error 547: The UPDATE statement conflicted with the CHECK constraint "x"\.\)/,
      );
      assert.equal((error as { number?: number }).number, 266, 'and its fields');
      return true;
    });
    await assert.rejects(dialect.retentionDeleteBatch({ kind: 'outbox-sent', olderThanMs: 1, limit: 1 }), /preceded by error 547/);
  });

  it('(d) a claim-lock error hidden behind error 266 is still recognised', async () => {
    const claim = scriptedDataSource(() => mismatch({ number: 51001, message: 'QueueBox: sp_getapplock did not grant the claim lock.' }));
    await assert.rejects(
      createDialect(claim.dataSource, TABLES).outboxClaimBatch({ limit: 1, leaseMs: 1000 }),
      (error: unknown) => error instanceof QueueBoxError && error.code === 'QUEUEBOX_CLAIM_LOCK' && /was not granted/.test(error.message),
    );
  });
});

describe('SQL Server dialect: admin statements give way to the workers (issue 38 L1)', () => {
  it('every admin statement is sent at READ COMMITTED with low deadlock priority and a 2 s lock wait; a lock wait that runs out is QUEUEBOX_ADMIN_BUSY', async () => {
    let failWith: Error | undefined;
    const { dataSource, calls } = scriptedDataSource((statement) => {
      if (failWith) return failWith;
      if (statement === sql.deadLetterCountSql('[queuebox_outbox]', 'outbox')) return { records: [{ n: '0' }] };
      if (statement === sql.clockNowSql()) return { records: [{ now: new Date() }] };
      return { records: [] };
    });
    const dialect = createDialect(dataSource, TABLES);
    const selection = {
      component: 'outbox' as const,
      name: null,
      errorContains: null,
      deadAfter: null,
      deadBefore: null,
      ids: null,
      key: null,
    };
    const admin: [string, () => Promise<unknown>][] = [
      ['adminBacklog', () => dialect.adminBacklog()],
      ['adminThroughput', () => dialect.adminThroughput({ minutes: 5 })],
      ['adminClaimList', () => dialect.adminClaimList({ component: 'outbox', limit: 5 })],
      ['blockedKeyList', () => dialect.blockedKeyList({ component: 'inbox', limit: 5 })],
      ['blockedKeySkipHead', () => dialect.blockedKeySkipHead({ component: 'outbox', key: 'k', reason: 'r' })],
      ['deadLetterList', () => dialect.deadLetterList({ selection, afterId: null, limit: 5, includePayload: false })],
      ['deadLetterCount', () => dialect.deadLetterCount({ selection })],
      ['deadLetterReplay', () => dialect.deadLetterReplay({ selection, afterId: null, limit: 5 })],
      ['deadLetterDiscard', () => dialect.deadLetterDiscard({ selection, afterId: null, limit: 5 })],
      ['instanceList', () => dialect.instanceList()],
    ];
    assert.equal(sql.ADMIN, 'SET DEADLOCK_PRIORITY LOW;\nSET LOCK_TIMEOUT 2000;\n');
    assert.equal(sql.ADMIN_LOCK_WAIT_MS, 2000);
    for (const [method, call] of admin) {
      const before = calls.length;
      await call();
      const sent = calls.slice(before).filter((c) => c.what === 'query' && c.sql !== sql.clockNowSql());
      assert.equal(sent.length, 1, method);
      assert.deepEqual([sent[0].pinned, sent[0].admin], [true, true], method);
    }
    // The workers' statements do not give way: only admin ones (and the housekeeping, in its own statements).
    const before = calls.length;
    await dialect.leaseRenew({ table: 'outbox', id: '7', token: '0f0e0d0c-0000-4000-8000-000000000000', leaseMs: 1000 });
    assert.equal(calls.slice(before)[0].admin, false);
    failWith = Object.assign(new Error('Lock request time out period exceeded.'), { number: 1222 });
    await assert.rejects(
      dialect.adminBacklog(),
      (error: unknown) =>
        error instanceof QueueBoxError &&
        error.code === 'QUEUEBOX_ADMIN_BUSY' &&
        /waited more than 2000 ms for a row lock \(error 1222\).*Nothing was changed; try again/.test(error.message) &&
        error.cause === failWith,
    );
    failWith = sqlError(547);
    await assert.rejects(dialect.deadLetterReplay({ selection, afterId: null, limit: 5 }), /SQL Server error 547/);
  });

  it("the CLI's status query and queuebox/testing's row states pin READ COMMITTED themselves (they are sent with dataSource.query)", () => {
    const finished = finishedCountQuery('mssql', TABLES).sql;
    assert.ok(finished.startsWith(`${lease.PINNED_READ_COMMITTED}${sql.ADMIN}SELECT N'outbox' AS [component]`), finished);
    assert.ok(rowStatesQuery('mssql', TABLES.outbox, ['1']).sql.startsWith(`${lease.PINNED_READ_COMMITTED}SELECT `));
  });
});

describe('SQL Server dialect: the retention lock (issue 38 L5)', () => {
  it('a lock held by another replica (-1) skips the run quietly; any other failure (-2, -3, -999) is logged', async () => {
    for (const [granted, warned] of [
      [-1, false],
      [-2, true],
      [-3, true],
      [-999, true],
    ] as const) {
      const { dataSource } = scriptedDataSource((statement) => (statement === sql.retentionTryLockSql() ? { records: [{ granted }] } : {}));
      const warnings: string[] = [];
      const dialect = new SqlServerDialect(dataSource, TABLES, { warn: (message) => warnings.push(message) });
      let ran = false;
      assert.equal(
        await dialect.retentionWithLock(async () => {
          ran = true;
          return 1;
        }),
        null,
      );
      assert.equal(ran, false);
      assert.equal(warnings.length, warned ? 1 : 0, String(granted));
      if (warned)
        assert.match(warnings[0], new RegExp(`sp_getapplock returned ${granted} \\(.*\\), not -1.*This retention run is skipped`));
    }
  });
});
