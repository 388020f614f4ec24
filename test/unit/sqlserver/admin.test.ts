// The SQL Server admin statements (the CLI's, the dashboard's, QueueBoxAdmin's): how the dialect
// sends them, and their shape.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { createDialect } from '../../../lib/core/create-dialect';
import { finishedCountQuery, rowStatesQuery } from '../../../lib/dialects/drivers';
import * as instances from '../../../lib/dialects/sqlserver/instances.sql';
import * as lease from '../../../lib/dialects/sqlserver/lease.sql';
import { QueueBoxError, QueueBoxValidationError } from '../../../lib/errors/queuebox.errors';
import { COMPONENTS, scriptedDataSource, sql, sqlError, TABLES, typed } from '../../support/sqlserver';

describe('SQL Server admin: instants in UTC whatever the Node time zone', () => {
  it('sends deadAfter/deadBefore as ISO-8601 UTC text under TZ=Europe/Berlin, and the statement reads them as UTC', () => {
    // A child process, so the time zone is Berlin's from the start (Node reads TZ once).
    const child = `
      const { createDialect } = require(${JSON.stringify(join(__dirname, '../../../lib/core/create-dialect.js'))});
      const { resolveTables } = require(${JSON.stringify(join(__dirname, '../../../lib/options/options.resolver.js'))});
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

describe('SQL Server admin: keys sized to their columns', () => {
  it('refuses an admin name, key, source or aggregate longer than its 255-character column, naming the field; 255 is sent as NVARCHAR(255)', async () => {
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
});

describe('SQL Server admin statements give way to the workers', () => {
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

describe('SQL Server admin statements: pinned shape', () => {
  const O = '[messaging].[events_out]';
  const I = '[messaging].[events_in]';

  it('replay and discard change dead rows only: selected as dead and re-checked in the write', () => {
    for (const c of COMPONENTS) {
      for (const statement of [sql.deadLetterReplaySql(O, c), sql.deadLetterDiscardSql(O, c)]) {
        assert.match(statement, /WITH \[batch\] AS \(\n {2}SELECT TOP \(@8\) /);
        assert.match(statement, /WHERE \[state\] = N'dead'\n {2}AND \(@0 IS NULL OR /, 'the batch holds dead rows only');
        assert.match(
          statement,
          /\nWHERE \[state\] = N'dead' AND \(@6 IS NULL OR \[fingerprint\] = @6\)\nOPTION \(RECOMPILE\)$/,
          'the write re-checks dead, and the group fingerprint',
        );
        assert.match(statement, /AND \(@7 IS NULL OR \[id\] > @7\)\n {2}ORDER BY \[id\]/, 'keyset batches in id order');
        assert.match(
          statement,
          new RegExp(`AND \\(@5 IS NULL OR \\[${c === 'outbox' ? 'key' : 'aggregate_id'}\\] = @5\\)`),
          'the key filter',
        );
      }
      assert.match(sql.deadLetterListSql(O, c, false), /^SELECT TOP \(@8\) .*\nFROM .*\nWHERE \[state\] = N'dead'/s);
      assert.match(sql.deadLetterListSql(O, c, false, true), /AND \(@7 IS NULL OR \[id\] < @7\)\nORDER BY \[id\] DESC\n/, 'newest first');
      assert.doesNotMatch(sql.deadLetterListSql(O, c, false), /\[payload\]/, 'no payload unless asked');
      assert.match(sql.deadLetterListSql(O, c, true), /, \[payload\]\n/);
    }
    const replay = sql.deadLetterReplaySql(O, 'outbox');
    assert.match(replay, /SET \[state\] = N'pending', \[attempts\] = 0, \[available_at\] = SYSUTCDATETIME\(\), \[claim_token\] = NULL/);
    assert.match(replay, /JSON_MODIFY\(\[headers\], '\$\."X-QueueBox-Replay-Count"'/);
    assert.match(replay, /'\$\."X-QueueBox-Replayed-At"', CONVERT\(NVARCHAR\(23\), SYSUTCDATETIME\(\), 126\) \+ N'Z'\)/);
    assert.doesNotMatch(replay, /\[message_id\]/, 'the message id is never rewritten');
  });

  it('skip-head locks the head row before any index entry of it, and never takes a live claim (database clock)', () => {
    for (const c of COMPONENTS) {
      const statement = sql.blockedKeySkipHeadSql(O, c);
      const match =
        c === 'outbox'
          ? 'e.[key] = @0 AND e.[key] IS NOT NULL'
          : 'e.[source] = @0 AND e.[aggregate_id] = @1 AND e.[aggregate_id] IS NOT NULL';
      // The head is found by a plain read: no UPDLOCK on the key index's entry (it deadlocked with a claim's row-first locks).
      assert.ok(
        statement.startsWith(`DECLARE @head BIGINT = (
  SELECT TOP (1) e.[id] FROM [messaging].[events_out] AS e
  WHERE ${match} AND e.[state] IN (N'pending', N'processing')
  ORDER BY e.[id]);
UPDATE t
`),
        statement,
      );
      assert.doesNotMatch(statement, /UPDLOCK/);
      // Then updated through its primary key, every condition checked again under the update's lock.
      assert.match(
        statement,
        /FROM \[messaging\]\.\[events_out\] AS t WITH \(ROWLOCK, INDEX \(\[events_out_pkey\]\), FORCESEEK\)\nWHERE t\.\[id\] = @head\n/,
      );
      assert.match(
        statement,
        /AND \(t\.\[state\] = N'pending' OR \(t\.\[state\] = N'processing' AND t\.\[lease_expires_at\] <= SYSUTCDATETIME\(\)\)\)\n/,
      );
      assert.ok(
        statement.endsWith(
          `AND NOT EXISTS (SELECT 1 FROM [messaging].[events_out] AS e WHERE ${match} AND e.[state] IN (N'pending', N'processing') AND e.[id] < t.[id])`,
        ),
        'still the first unfinished row of its key',
      );
      assert.match(statement, /SET \[state\] = N'dead', \[claim_token\] = NULL, \[lease_expires_at\] = NULL, \[last_error\] = @\d/);
    }
  });

  it('blocked keys: failing heads (attempts > 0 with an error) and held heads with rows behind, none with an earlier unfinished row', () => {
    const statement = sql.blockedKeyListSql(I, 'inbox', { instances: '[queuebox_instances]', outbox: O, inbox: I });
    assert.match(statement, /\(\(h\.\[attempts\] > 0 AND h\.\[last_error\] IS NOT NULL\) OR \(h\.\[state\] = N'processing' AND EXISTS/);
    assert.match(
      statement,
      /NOT EXISTS \(SELECT 1 FROM \[messaging\]\.\[events_in\] AS e WHERE e\.\[aggregate_id\] = h\.\[aggregate_id\] AND e\.\[source\] = h\.\[source\]/,
    );
  });

  it('blocked keys and claims name an owner only while the row is held (processing, lease later than now); the last claimer always', () => {
    const N = '[queuebox_instances]';
    const tables = { instances: N, outbox: O, inbox: I };
    const held = "(h.[state] = N'processing' AND h.[lease_expires_at] > SYSUTCDATETIME())";
    for (const [name, statement] of [
      ['blocked outbox', sql.blockedKeyListSql(O, 'outbox', tables)],
      ['blocked inbox', sql.blockedKeyListSql(I, 'inbox', tables)],
      ['claims outbox', sql.adminClaimListSql(O, 'outbox', tables)],
      ['claims inbox', sql.adminClaimListSql(I, 'inbox', tables)],
    ]) {
      assert.ok(statement.includes(`CASE WHEN ${held} THEN h.[claimed_by] END AS [owner],`), name);
      assert.ok(
        statement.includes(
          `CASE WHEN ${held} AND h.[claimed_by] IS NOT NULL\n            THEN COALESCE((SELECT ${instances.instanceState('n', tables)} FROM ${N} AS n WHERE n.[id] = h.[claimed_by]), N'dead') END AS [owner_state],`,
        ),
        `${name}: the owner's state, dead once its row is gone`,
      );
      assert.ok(statement.includes('h.[claimed_by] AS [last_claimed_by]'), name);
      assert.doesNotMatch(statement, /owner_alive/, name);
    }
    const blocked = sql.blockedKeyListSql(O, 'outbox', tables);
    assert.ok(
      blocked.includes(`CASE WHEN ${held} THEN DATEDIFF_BIG(MILLISECOND, h.[claimed_at], SYSUTCDATETIME()) / 1000.0 END AS [held_for]`),
    );
  });
});
