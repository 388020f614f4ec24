import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { DataSourceOptions } from 'typeorm';
import { parseDatabaseUrl } from '../../lib/cli/database-url';
import { dialectDriver } from '../../lib/dialects/drivers';
import { tsqlSyntaxErrors } from '../support/sqlserver';

// What `queuebox verify` sends to SQL Server beside QueueBox's own statements: the settings report,
// the permission check, the workers' sessions and KILL. No SQL Server runs here: each statement is
// parsed with the T-SQL grammar of ANTLR's grammars-v4 (as test/unit/sqlserver/statements.test.ts
// does for the dialect) and its shape is pinned. The PostgreSQL ones run in test/e2e/verify.test.ts.

const sqlServer = dialectDriver('mssql').verify;
const postgres = dialectDriver('postgres').verify;

/** The type and value tedious would send for a typed parameter (MssqlParameter). */
const parameter = (value: unknown) => value as { value: unknown; type: string; params: unknown[] };

describe('queuebox verify on SQL Server: its statements (parsed, not run: no SQL Server here)', () => {
  const permissions = sqlServer.sessionPermissions?.();
  const statements = {
    settings: sqlServer.settings().sql,
    sessionPermissions: permissions?.sql ?? '',
    sessionsNamed: sqlServer.sessionsNamed('queuebox-verify-1a2b3c4d-w1').sql,
    sessionEnd: sqlServer.sessionEnd(57).sql,
    claimedWithinOutbox: sqlServer.claimedWithin(
      { name: 'queuebox_verify_outbox', qualified: 'queuebox_verify_outbox' },
      'outbox',
      'verify.outbox',
      3400,
    ).sql,
    claimedWithinInbox: sqlServer.claimedWithin(
      { schema: 'ops', name: 'queuebox_verify_inbox', qualified: 'ops.queuebox_verify_inbox' },
      'inbox',
      'verify.pull',
      3400,
    ).sql,
  };

  for (const [name, statement] of Object.entries(statements)) {
    it(`${name} parses with the T-SQL grammar`, () => {
      assert.deepEqual(tsqlSyntaxErrors(statement), [], statement);
    });
  }

  it('the admin pause reads the keys claimed within the last N ms of one destination or source, by the database clock', () => {
    const { sql, params } = sqlServer.claimedWithin(
      { name: 'queuebox_verify_inbox', qualified: 'queuebox_verify_inbox' },
      'inbox',
      'verify.pull',
      3400,
    );
    assert.match(sql, /^SET TRANSACTION ISOLATION LEVEL READ COMMITTED;/);
    assert.match(
      sql,
      /SELECT t\.\[aggregate_id\] AS \[key\] FROM \[queuebox_verify_inbox\] AS t WHERE t\.\[source\] = @0 AND t\.\[claimed_at\] >= DATEADD\(MILLISECOND, -CAST\(@1 % 1000 AS INT\), DATEADD\(SECOND, -CAST\(@1 \/ 1000 AS INT\), SYSUTCDATETIME\(\)\)\)$/,
    );
    assert.deepEqual(
      params.map((p) => [parameter(p).value, parameter(p).type]),
      [
        ['verify.pull', 'nvarchar'],
        [3400, 'bigint'],
      ],
    );
    assert.match(
      sqlServer.claimedWithin({ name: 'o', qualified: 'o' }, 'outbox', 'verify.outbox', 1).sql,
      /SELECT t\.\[key\] AS \[key\] FROM \[o\] AS t WHERE t\.\[destination\] = @0/,
    );
  });

  it('the grammar rejects broken T-SQL (the parse above proves something)', () => {
    assert.notDeepEqual(tsqlSyntaxErrors('KILL WHERE session_id = 57'), []);
    assert.notDeepEqual(tsqlSyntaxErrors(statements.sessionsNamed.replace('WHERE', 'WHERE WHERE')), []);
  });

  it('the settings report names the database settings that bear on claims: RCSI, snapshot isolation, compatibility level, the session isolation, the version', () => {
    const { sql, params } = sqlServer.settings();
    assert.deepEqual(params, []);
    for (const column of [
      'is_read_committed_snapshot_on',
      'snapshot_isolation_state_desc',
      'compatibility_level',
      "SERVERPROPERTY('ProductVersion')",
      "SERVERPROPERTY('EngineEdition')",
      'transaction_isolation_level',
      "DATABASEPROPERTYEX(DB_NAME(), 'IsOptimizedLockingOn')",
      '@@VERSION',
    ]) {
      assert.ok(sql.includes(column), `${column} in ${sql}`);
    }
    // This database only, and this session only: readable without VIEW SERVER STATE.
    assert.equal((sql.match(/WHERE d\.\[database_id\] = DB_ID\(\)/g) ?? []).length, 3);
    assert.match(sql, /FROM sys\.dm_exec_sessions AS s WHERE s\.\[session_id\] = @@SPID/);
    for (const name of ['product_version', 'read_committed_snapshot', 'snapshot_isolation', 'compatibility_level', 'session_isolation']) {
      assert.match(sql, new RegExp(`N'${name}'`));
    }
  });

  it('the permission check asks for seeing and ending sessions on SQL Server and on Azure SQL Database, a NULL (unknown there) counting as not granted', () => {
    assert.ok(permissions, 'SQL Server checks permissions before KILL');
    assert.deepEqual(permissions.params, []);
    for (const permission of ["N'VIEW SERVER STATE'", "N'VIEW DATABASE STATE'", "N'ALTER ANY CONNECTION'", "N'KILL DATABASE CONNECTION'"]) {
      assert.ok(permissions.sql.includes(permission), permission);
    }
    assert.equal((permissions.sql.match(/COALESCE\(HAS_PERMS_BY_NAME\(/g) ?? []).length, 4);
    assert.match(permissions.sql, /AS \[may_see\]/);
    assert.match(permissions.sql, /AS \[may_end\]/);
    assert.match(sqlServer.sessionPermissionNames.end, /ALTER ANY CONNECTION/);
    assert.match(sqlServer.sessionPermissionNames.see, /VIEW SERVER STATE/);
  });

  it("the workers' sessions are found by program_name, in this database, never this session, the name a typed parameter", () => {
    const { sql, params } = sqlServer.sessionsNamed('queuebox-verify-1a2b3c4d-w1');
    assert.match(sql, /s\.\[program_name\] = @0/);
    assert.match(sql, /s\.\[database_id\] = DB_ID\(\)/);
    assert.match(sql, /s\.\[session_id\] <> @@SPID/);
    assert.match(sql, /AS \[session\]/);
    assert.equal(params.length, 1);
    assert.equal(parameter(params[0]).value, 'queuebox-verify-1a2b3c4d-w1');
    assert.equal(parameter(params[0]).type, 'nvarchar');
  });

  it('KILL takes a session id written into the statement, only a whole number SQL Server can hand out', () => {
    assert.deepEqual(sqlServer.sessionEnd(57), { sql: 'KILL 57', params: [] });
    assert.deepEqual(sqlServer.sessionEnd(32_767), { sql: 'KILL 32767', params: [] });
    for (const bad of [0, -1, 1.5, 32_768, Number.NaN, Number.POSITIVE_INFINITY, '57; DROP TABLE x' as unknown as number]) {
      assert.throws(() => sqlServer.sessionEnd(bad), /not a session id/, String(bad));
    }
  });

  it("the workers' connections carry their name as tedious's appName (program_name), the URL's other options kept", () => {
    const { connection } = parseDatabaseUrl('mssql://sa:secret@db.example:1433/orders?trustServerCertificate=true', { poolMax: 7 });
    const named = sqlServer.withApplicationName(connection, 'queuebox-verify-x-w2') as DataSourceOptions & {
      options: Record<string, unknown>;
      pool: { max: number };
    };
    assert.equal(named.options.appName, 'queuebox-verify-x-w2');
    assert.equal(named.options.encrypt, true);
    assert.equal(named.options.trustServerCertificate, true);
    assert.equal(named.pool.max, 7);
  });
});

describe('queuebox verify on PostgreSQL: how its workers are named', () => {
  it('the name goes into the URL as application_name (node-postgres lets the URL win over the pool options), replacing one the user gave', () => {
    const { connection } = parseDatabaseUrl('postgres://app:secret@db:5432/orders?application_name=mine&sslmode=require', { poolMax: 9 });
    const named = postgres.withApplicationName(connection, 'queuebox-verify-x-w1') as DataSourceOptions & {
      url: string;
      extra: { max: number };
    };
    const url = new URL(named.url);
    assert.equal(url.searchParams.get('application_name'), 'queuebox-verify-x-w1');
    assert.equal(url.searchParams.get('sslmode'), 'require');
    assert.equal(url.password, 'secret');
    assert.equal(named.extra.max, 9);
  });

  it('needs no permission check: a role may end the sessions of its own role', () => {
    assert.equal(postgres.sessionPermissions, undefined);
    assert.deepEqual(postgres.sessionEnd(4242), { sql: 'SELECT pg_terminate_backend($1) AS ended', params: [4242] });
  });
});
