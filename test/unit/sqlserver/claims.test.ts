// SQL Server claims (outbox, relay, pull): how the dialect runs them through TypeORM, and the shape
// of their statements: the claim lock, the row locks, the heads they take, the index they seek and
// what they cost.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createDialect } from '../../../lib/core/create-dialect';
import * as postgresClaims from '../../../lib/dialects/postgres/claims.sql';
import * as postgresInbox from '../../../lib/dialects/postgres/inbox.sql';
import { QueueBoxError } from '../../../lib/errors/queuebox.errors';
import {
  ALL_STATEMENTS,
  FINISHED_SENT,
  isClaim,
  lockTolerant,
  scriptedDataSource,
  sql,
  sqlError,
  T,
  TABLES,
  typed,
} from '../../support/sqlserver';

const postgres = { ...postgresClaims, ...postgresInbox };

describe('SQL Server claims: how the dialect runs them', () => {
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

describe('SQL Server claims: the claim lock, the row locks and the heads taken', () => {
  it('every claim (outbox, relay, pull): a transaction-owned exclusive lock, 10 s wait, checked, never released by hand', () => {
    for (const statement of [sql.outboxClaimSql(T), sql.inboxRelayClaimSql(T), sql.inboxPullClaimSql(T)]) {
      assert.ok(
        statement.startsWith(`SET XACT_ABORT OFF;
SET NOCOUNT ON;
DECLARE @claim_lock INT;
EXEC @claim_lock = sp_getapplock @Resource = @0, @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 10000;
IF @claim_lock < 0
BEGIN
  DECLARE @claim_lock_error INT = 51000 - @claim_lock;
  THROW @claim_lock_error, N'QueueBox: sp_getapplock did not grant the claim lock.', 1;
END;
`),
        statement,
      );
      // A session-owned lock outlives a batch cut off by a timeout; the transaction's ends with it.
      assert.doesNotMatch(statement, /sp_releaseapplock|N'Session'/);
    }
    for (const { name, statement } of ALL_STATEMENTS) assert.doesNotMatch(statement, /N'Session'/, name);
    assert.equal(sql.CLAIM_LOCK_WAIT_MS, 10_000);
  });

  it('every claim bounds its row-lock waits once it holds the claim lock, and resets nothing (SET inside sp_executesql ends with the batch)', () => {
    assert.equal(sql.CLAIM_ROW_LOCK_WAIT_MS, 3000);
    assert.equal(sql.CLAIM_SEARCH_LOCK_WAIT_MS, 200);
    assert.equal(sql.CLAIM_WALK_LOCK_WAIT_MS, 0);
    for (const statement of [sql.outboxClaimSql(T), sql.inboxRelayClaimSql(T), sql.inboxPullClaimSql(T)]) {
      assert.ok(statement.includes('END;\nSET LOCK_TIMEOUT 200;\nBEGIN TRY\n'), 'set after the claim lock is granted, before the claim');
      // Any error but a row-lock timeout that a step handles itself ends the batch (XACT_ABORT is OFF).
      assert.ok(statement.endsWith('END TRY\nBEGIN CATCH\n  THROW;\nEND CATCH;'), 'the claim ends in its TRY');
      assert.doesNotMatch(statement, /SET LOCK_TIMEOUT -1/, 'no reset: the batch scope restores it');
      // The walk waits for no lock; locking and updating the rows found wait up to 3 s, after the search.
      const walk = statement.indexOf('SET LOCK_TIMEOUT 0;');
      const locking = statement.indexOf('SET LOCK_TIMEOUT 3000;\n  INSERT INTO @candidates');
      assert.ok(walk > 0 && locking > walk, 'the walk at 0, then locking the rows found at 3000');
      assert.ok(statement.indexOf('UPDATE ', locking) > locking);
    }
    assert.equal(
      sql.databaseSettingsSql(),
      'SELECT [compatibility_level], [is_read_committed_snapshot_on] FROM sys.databases WHERE [database_id] = DB_ID()',
    );
  });

  it('claims materialize their candidates once, with UPDLOCK, READPAST, ROWLOCK and TOP, and return rows with OUTPUT', () => {
    for (const statement of [sql.outboxClaimSql(T), sql.inboxRelayClaimSql(T), sql.inboxPullClaimSql(T)]) {
      assert.match(statement, /DECLARE @candidates TABLE \(\[id\] BIGINT NOT NULL PRIMARY KEY\);/);
      assert.match(statement, /INSERT INTO @candidates \(\[id\]\)\s+SELECT TOP \(@1\) \w\.\[id\]/);
      assert.match(
        statement,
        /SELECT TOP \(@1\) \w\.\[id\](, \w\.\[available_at\])? FROM \[messaging\]\.\[events_out\] AS \w WITH \(UPDLOCK, READPAST, ROWLOCK, INDEX \(\[events_out_(pkey|lease_idx)\]\), FORCESEEK\)/,
      );
      assert.match(statement, /INNER JOIN @candidates AS c ON c\.\[id\] = \w\.\[id\]/);
      assert.match(statement, /SET \[state\] = N'processing', \[claim_token\] = NEWID\(\), \[claimed_at\] = SYSUTCDATETIME\(\)/);
      assert.match(statement, /\[attempts\] = \w\.\[attempts\] \+ 1/);
      assert.match(statement, /OUTPUT inserted\.\[id\],/);
      assert.doesNotMatch(statement, /LIMIT|RETURNING|SKIP LOCKED/);
    }
    assert.match(sql.inboxPullClaimSql(T), /SELECT TOP \(@room\)/);
    // The relay reads each source's index in order (source by source), not every pending row of all of them.
    assert.match(sql.inboxRelayClaimSql(T), /SELECT s\.\[source\] FROM OPENJSON\(@3\) WITH \(\[source\] NVARCHAR\(255\) '\$'\) AS s;/);
    assert.match(
      sql.inboxRelayClaimSql(T),
      /WHILE @n IS NOT NULL\n\s+BEGIN\n\s+SET @source = \(SELECT \[source\] FROM @sources WHERE \[n\] = @n\);/,
    );
    assert.match(sql.inboxRelayClaimSql(T), /WHERE i\.\[source\] = @source AND i\.\[state\] = N'pending'/);
  });

  it('claims take only the head of a key or aggregate (no earlier unfinished row, none in flight)', () => {
    const headOfKey = `WHERE (w.[key] IS NULL OR (
      NOT EXISTS (SELECT 1 FROM [messaging].[events_out] AS e WITH (INDEX ([events_out_key_idx]), FORCESEEK) WHERE e.[key] = w.[key] AND e.[key] IS NOT NULL
        AND e.[state] IN (N'pending', N'processing') AND e.[id] < w.[id])
      AND NOT EXISTS (SELECT 1 FROM [messaging].[events_out] AS e WITH (INDEX ([events_out_key_in_flight_idx]), FORCESEEK) WHERE e.[key] = w.[key] AND e.[key] IS NOT NULL
        AND e.[state] = N'processing')))`;
    assert.ok(sql.outboxClaimSql(T).includes(headOfKey), sql.outboxClaimSql(T));
    // The in-flight probes read the unique in-flight index alone (issue 26 N1: never the key index's later, locked entries).
    assert.equal((sql.outboxClaimSql(T).match(/AS e WITH \(INDEX \(\[events_out_key_in_flight_idx\]\), FORCESEEK\)/g) ?? []).length, 2);
    for (const statement of [sql.inboxRelayClaimSql(T), sql.inboxPullClaimSql(T)]) {
      assert.equal((statement.match(/AS e WITH \(INDEX \(\[events_out_aggregate_in_flight_idx\]\), FORCESEEK\)/g) ?? []).length, 2);
    }
    // Past the scan window, a key's head is its first unfinished row, taken only if pending, due and none of the key is in flight.
    assert.match(
      sql.outboxClaimSql(T),
      /WHERE o\.\[key\] = @key AND o\.\[key\] IS NOT NULL AND o\.\[state\] IN \(N'pending', N'processing'\)\s+ORDER BY o\.\[id\]/,
    );
    assert.match(sql.outboxClaimSql(T), /WHERE h\.\[state\] = N'pending' AND h\.\[available_at\] <= SYSUTCDATETIME\(\)/);
    for (const statement of [sql.inboxRelayClaimSql(T), sql.inboxPullClaimSql(T)]) {
      assert.match(statement, /e\.\[source\] = w\.\[source\] AND e\.\[aggregate_id\] = w\.\[aggregate_id\]/);
      assert.match(statement, /AND e\.\[state\] IN \(N'pending', N'processing'\) AND e\.\[id\] < w\.\[id\]\)/);
      assert.match(statement, /AND e\.\[state\] = N'processing' AND e\.\[id\] <> w\.\[id\]\)/);
      assert.match(
        statement,
        /WHERE i\.\[source\] = @source AND i\.\[aggregate_id\] = @aggregate AND i\.\[aggregate_id\] IS NOT NULL\s+AND i\.\[state\] IN \(N'pending', N'processing'\)/,
      );
    }
    // Candidate scans pass over rows others hold; the lookup of a key's head never does (it would take a later row for the head).
    assert.match(
      sql.outboxClaimSql(T),
      /SELECT TOP \(500\) o\.\[available_at\], o\.\[id\], o\.\[key\] FROM \[messaging\]\.\[events_out\] AS o WITH \(READPAST\)/,
    );
    assert.match(
      sql.outboxClaimSql(T),
      /SELECT TOP \(1\) o\.\[id\], o\.\[state\], o\.\[available_at\] FROM \[messaging\]\.\[events_out\] AS o WITH \(INDEX \(\[events_out_key_idx\]\), FORCESEEK\)\n/,
    );
    assert.match(
      sql.inboxPullClaimSql(T),
      /SELECT TOP \(1\) i\.\[id\], i\.\[state\], i\.\[available_at\] FROM \[messaging\]\.\[events_out\] AS i WITH \(INDEX \(\[events_out_aggregate_idx\]\), FORCESEEK\)\n/,
    );
    // A page is PostgreSQL's window (the claim reads more than one on SQL Server; see the claim-cost tests below).
    assert.equal(sql.CLAIM_SCAN_WINDOW, postgres.CLAIM_SCAN_WINDOW);
    for (const statement of [sql.outboxClaimSql(T), sql.inboxRelayClaimSql(T), sql.inboxPullClaimSql(T)]) {
      assert.match(statement, new RegExp(`SELECT TOP \\(${sql.CLAIM_SCAN_WINDOW}\\) \\w\\.\\[available_at\\], \\w\\.\\[id\\]`));
    }
    // A pull claim takes expired claims directly, and pending rows only when available.
    assert.match(sql.inboxPullClaimSql(T), /i\.\[state\] = N'processing' AND i\.\[lease_expires_at\] <= SYSUTCDATETIME\(\)/);
    assert.match(sql.inboxPullClaimSql(T), /i\.\[state\] = N'pending' AND i\.\[available_at\] <= SYSUTCDATETIME\(\)/);
  });
});

describe('SQL Server claims keep what they found when a row lock is met', () => {
  it('the outbox claim: XACT_ABORT OFF, the first page gives up after 200 ms, later pages and the walk wait for no lock and pass over a locked key', () => {
    const statement = sql.outboxClaimSql(T);
    assert.ok(statement.startsWith('SET XACT_ABORT OFF;\nSET NOCOUNT ON;\n'), 'a lock timeout ends one statement, not the transaction');
    const blocks = lockTolerant(statement);
    assert.equal(blocks.length, 7, blocks.map((b) => b.body).join('\n----\n'));
    const [page, unkeyed, firstAfterCursor, first, perKey, nextKey, wrapped] = blocks;
    assert.match(
      page.body,
      /SELECT TOP \(500\) o\.\[available_at\], o\.\[id\], o\.\[key\] FROM \[messaging\]\.\[events_out\] AS o WITH \(READPAST\)/,
    );
    assert.equal(
      page.orElse,
      'SET @seen_all = 0; SET @pages = 10;',
      'a page that meets a lock keeps nothing and ends the pages: the walk goes on',
    );
    assert.match(unkeyed.body, /o\.\[key\] IS NULL/);
    // The walk only lists keys: it passes over locked entries (READPAST); a key's head lookup never does.
    for (const block of [firstAfterCursor, first, nextKey, wrapped]) {
      assert.match(block.body, /SET @key = \(SELECT MIN\(k\.\[key\]\) FROM \[messaging\]\.\[events_out\] AS k WITH \(READPAST\)\n/);
    }
    assert.match(firstAfterCursor.body, /AND k\.\[key\] > @walk_from\);$/);
    assert.match(first.body, /AND k\.\[key\] IS NOT NULL\);$/);
    assert.match(nextKey.body, /AND k\.\[key\] > @walked_to\);$/s);
    assert.equal(nextKey.orElse, 'SET @key = NULL; SET @wrapped = 1;', 'a walk that cannot go on ends (no endless loop on one key)');
    assert.equal(wrapped.orElse, 'SET @key = NULL;');
    assert.match(
      perKey.body,
      /SELECT TOP \(1\) o\.\[id\], o\.\[state\], o\.\[available_at\] FROM \[messaging\]\.\[events_out\] AS o WITH /,
    );
    assert.doesNotMatch(perKey.body, /READPAST/);
    assert.equal(perKey.orElse, undefined, 'a locked key is passed over for this claim; the walk goes on');
    // Every search statement is one of those; only locking what was found may fail the claim.
    assert.equal((statement.match(/INSERT INTO @found/g) ?? []).length, 3);
    assert.equal(blocks.filter((b) => b.body.includes('INSERT INTO @found')).length, 3);
    // The first page at 200 ms (set before it), every later page and the walk at 0 (set after each page).
    const pageAt = statement.indexOf(page.body);
    assert.equal(statement.lastIndexOf('SET LOCK_TIMEOUT 200;', pageAt), statement.indexOf('SET LOCK_TIMEOUT 200;\n  WHILE @found_n < @1'));
    const walkAt = statement.indexOf('SET LOCK_TIMEOUT 0;');
    assert.ok(walkAt > pageAt && walkAt < statement.indexOf(unkeyed.body), 'later pages and the walk at LOCK_TIMEOUT 0');
  });

  it('the relay and pull claims: the same, per source and aggregate', () => {
    for (const statement of [sql.inboxRelayClaimSql(T), sql.inboxPullClaimSql(T)]) {
      assert.ok(statement.startsWith('SET XACT_ABORT OFF;\nSET NOCOUNT ON;\n'));
      const blocks = lockTolerant(statement);
      assert.equal(blocks.length, 7, blocks.map((b) => b.body).join('\n----\n'));
      const [page, unaggregated, firstAfterCursor, first, perAggregate, nextAggregate, wrapped] = blocks;
      assert.match(page.body, /WHERE i\.\[source\] = @source AND i\.\[state\] = N'pending'/);
      assert.equal(page.orElse, 'SET @seen_all = 0; SET @pages = 10;');
      assert.match(unaggregated.body, /i\.\[aggregate_id\] IS NULL/);
      for (const block of [firstAfterCursor, first, nextAggregate, wrapped]) {
        assert.match(
          block.body,
          /SET @aggregate = \(SELECT MIN\(k\.\[aggregate_id\]\) FROM \[messaging\]\.\[events_out\] AS k WITH \(READPAST\)\n/,
        );
        assert.match(block.body, /WHERE k\.\[source\] = @source AND /);
      }
      assert.match(
        perAggregate.body,
        /SELECT TOP \(1\) i\.\[id\], i\.\[state\], i\.\[available_at\] FROM \[messaging\]\.\[events_out\] AS i WITH /,
      );
      assert.doesNotMatch(perAggregate.body, /READPAST/);
      assert.match(nextAggregate.body, /AND k\.\[aggregate_id\] > @walked_to\);$/);
      assert.equal(nextAggregate.orElse, 'SET @aggregate = NULL; SET @wrapped = 1;');
      assert.equal((statement.match(/INSERT INTO @found/g) ?? []).length, 3);
    }
  });
});

describe('SQL Server claims cost what their heads cost, not what the keys cost', () => {
  const CLAIMS = [
    { name: 'outbox', statement: sql.outboxClaimSql(T), found: '@found_n', limit: '@1', key: '@key' },
    { name: 'relay', statement: sql.inboxRelayClaimSql(T), found: '@source_found', limit: '@1', key: '@aggregate' },
    { name: 'pull', statement: sql.inboxPullClaimSql(T), found: '@source_found', limit: '@room', key: '@aggregate' },
  ];

  it('reads the available rows page by page after the last one read, and stops at the limit, at the last available row or after 10 pages', () => {
    assert.equal(sql.CLAIM_SCAN_PAGES, 10);
    for (const { name, statement, found, limit } of CLAIMS) {
      assert.ok(
        statement.includes(`SET @pages = 0;
  SET @seen_all = 0;
  SET @after_at = '00010101';
  SET @after_id = 0;
  SET LOCK_TIMEOUT 200;
  WHILE ${found} < ${limit} AND @seen_all = 0 AND @pages < 10
  BEGIN`),
        name,
      );
      // Keyset paging on the claim index: (available_at, id) after the last row read, oldest first.
      assert.match(
        statement,
        /AND (\w)\.\[available_at\] >= @after_at AND \(\1\.\[available_at\] > @after_at OR \1\.\[id\] > @after_id\)\n\s+ORDER BY \1\.\[available_at\], \1\.\[id\];\n\s+IF @@ROWCOUNT < 500 SET @seen_all = 1;\n\s+SELECT TOP \(1\) @after_at = l\.\[available_at\], @after_id = l\.\[id\] FROM @page AS l ORDER BY l\.\[available_at\] DESC, l\.\[id\] DESC;\n/,
        name,
      );
      assert.ok(statement.includes(`SELECT TOP (${limit} - ${found}) w.[id] FROM @page AS w\n`), `${name}: heads up to the limit`);
      assert.ok(statement.includes(`SET ${found} += @@ROWCOUNT;`), name);
      assert.match(
        statement,
        /DECLARE @page TABLE \(\[available_at\] DATETIME2 NOT NULL, \[id\] BIGINT NOT NULL, [^;]*PRIMARY KEY \(\[available_at\], \[id\]\)\);/,
      );
    }
  });

  it('walks key by key only when the pages found fewer than the limit without seeing every available row', () => {
    assert.match(sql.outboxClaimSql(T), /\n {2}END;\n {2}IF @found_n < @1 AND @seen_all = 0\n {2}BEGIN\n/);
    for (const statement of [sql.inboxRelayClaimSql(T), sql.inboxPullClaimSql(T)]) {
      assert.ok(
        statement.includes(`\n    IF @source_found < ${statement === CLAIMS[2].statement ? '@room' : '@1'} AND @seen_all = 0\n    BEGIN\n`),
      );
    }
    // The rows without a key and the walk are in that branch, after the pages.
    for (const { name, statement } of CLAIMS) {
      const branch = statement.indexOf('AND @seen_all = 0\n');
      const unkeyed = statement.search(/\.\[(key|aggregate_id)\] IS NULL AND /);
      assert.ok(branch > statement.indexOf('INSERT INTO @page'), name);
      assert.ok(unkeyed > branch && statement.indexOf('SESSION_CONTEXT') > unkeyed, name);
    }
  });

  it('the walk visits at most 1000 keys, stops at the limit, and goes on where the connection last stopped, wrapping around', () => {
    assert.equal(sql.CLAIM_WALK_KEYS, 1000);
    for (const { name, statement, found, limit, key } of CLAIMS) {
      assert.ok(statement.includes(`WHILE ${key} IS NOT NULL AND @walked < 1000 AND ${found} < ${limit}\n`), name);
      assert.ok(statement.includes(`SET @walk_from = CAST(SESSION_CONTEXT(@walk_cursor) AS NVARCHAR(255));`), name);
      assert.ok(statement.includes(`IF @wrapped = 1 AND ${key} > @walk_from SET ${key} = NULL;`), `${name}: one full turn at most`);
      assert.ok(statement.includes('IF @walked > 0 EXEC sp_set_session_context @key = @walk_cursor, @value = @walked_to;'), name);
      assert.ok(statement.includes(`SET @walked += 1;\n    SET @walked_to = ${key};`), name);
    }
    assert.ok(
      sql.outboxClaimSql(T).includes("SET @walk_cursor = N'queuebox_walk_' + CONVERT(NVARCHAR(64), HASHBYTES('SHA2_256', @0), 2);"),
    );
    for (const statement of [sql.inboxRelayClaimSql(T), sql.inboxPullClaimSql(T)]) {
      assert.ok(statement.includes("HASHBYTES('SHA2_256', @0 + N':' + @source)"), 'one cursor per claim lock and source');
    }
  });
});

describe('SQL Server claims seek the index meant, whatever its statistics say', () => {
  const CLAIMS = [sql.outboxClaimSql(T), sql.inboxRelayClaimSql(T), sql.inboxPullClaimSql(T)];

  it('every locked read of a claim, the batch completion and the followers completion force a seek on the index meant', () => {
    const PK = 'WITH (UPDLOCK, READPAST, ROWLOCK, INDEX ([events_out_pkey]), FORCESEEK)';
    const LEASE = 'WITH (UPDLOCK, READPAST, ROWLOCK, INDEX ([events_out_lease_idx]), FORCESEEK)';
    for (const statement of CLAIMS) {
      const lockedReads = statement.match(/WITH \(UPDLOCK[^\n]*?FORCESEEK\)/g) ?? [];
      assert.ok(lockedReads.length >= 1);
      for (const hints of lockedReads) assert.ok([PK, LEASE].includes(hints), hints);
      assert.ok(statement.includes(`${PK}\n  INNER JOIN @found AS f ON f.[id] =`), 'the rows found are locked through the primary key');
    }
    assert.match(
      sql.inboxPullClaimSql(T),
      /FROM \[messaging\]\.\[events_out\] AS i WITH \(UPDLOCK, READPAST, ROWLOCK, INDEX \(\[events_out_lease_idx\]\), FORCESEEK\)\nWHERE i\.\[source\] = @3 AND i\.\[state\] = N'processing'/,
    );
    for (const { name, statement } of ALL_STATEMENTS) {
      for (const hints of statement.match(/WITH \([^()]*(\([^()]*\)[^()]*)*FORCESEEK[^)]*\)/g) ?? []) {
        assert.match(
          hints,
          /INDEX \(\[\w+_(pkey|lease_idx|key_idx|aggregate_idx|key_in_flight_idx|aggregate_in_flight_idx)\]\), FORCESEEK\)$/,
          `${name}: no bare FORCESEEK (${hints})`,
        );
      }
    }
    for (const finished of [FINISHED_SENT, { state: 'processed', column: 'processed_at' } as const]) {
      assert.match(
        sql.leaseCompleteBatchSql(T, finished),
        /FROM \[messaging\]\.\[events_out\] AS t WITH \(INDEX \(\[events_out_pkey\]\), FORCESEEK\) INNER JOIN OPENJSON\(@0\)/,
      );
    }
    const complete = sql.inboxCompleteFollowersSql('[queuebox_inbox]');
    assert.match(complete, /FROM \[queuebox_inbox\] AS t WITH \(INDEX \(\[queuebox_inbox_pkey\]\), FORCESEEK\)\n/);
    assert.match(
      complete,
      /INNER JOIN \[queuebox_inbox\] AS h WITH \(INDEX \(\[queuebox_inbox_pkey\]\), FORCESEEK\) ON h\.\[id\] = c\.\[head_id\]/,
    );
  });

  it("every claim's UPDATE reaches its candidates by primary-key seeks, never a scan that waits for an open producer's row", () => {
    for (const [statement, alias] of [
      [sql.outboxClaimSql(T), 'o'],
      [sql.inboxRelayClaimSql(T), 'i'],
      [sql.inboxPullClaimSql(T), 'i'],
    ]) {
      const update = statement.slice(statement.lastIndexOf(`UPDATE ${alias}\n`));
      assert.match(
        update,
        new RegExp(
          `\\n\\s*FROM \\[messaging\\]\\.\\[events_out\\] AS ${alias} WITH \\(ROWLOCK, INDEX \\(\\[events_out_pkey\\]\\), FORCESEEK\\) INNER JOIN @candidates AS c ON c\\.\\[id\\] = ${alias}\\.\\[id\\]\\n`,
        ),
        update,
      );
      assert.equal((statement.match(/^\s*UPDATE /gm) ?? []).length, 1, 'the one UPDATE of the claim');
    }
  });

  it('the "earlier unfinished row" probes seek the key or aggregate index, whatever its statistics say', () => {
    const outbox = sql.outboxClaimSql(T);
    const earlier = outbox.match(/NOT EXISTS \(SELECT 1 FROM \S+ AS e [^\n]*\n[^\n]*AND e\.\[id\] < w\.\[id\]\)/g) ?? [];
    assert.equal(earlier.length, 1, outbox);
    assert.match(
      earlier[0],
      /AS e WITH \(INDEX \(\[events_out_key_idx\]\), FORCESEEK\) WHERE e\.\[key\] = w\.\[key\] AND e\.\[key\] IS NOT NULL\n/,
    );
    // The probe states the filter of the index it seeks (a filtered index is matched only so).
    assert.match(earlier[0], /AND e\.\[state\] IN \(N'pending', N'processing'\) AND e\.\[id\] < w\.\[id\]\)$/);
    for (const statement of [sql.inboxRelayClaimSql(T), sql.inboxPullClaimSql(T)]) {
      const probes = statement.match(/NOT EXISTS \(SELECT 1 FROM \S+ AS e [^\n]*\n[^\n]*AND e\.\[id\] < w\.\[id\]\)/g) ?? [];
      assert.equal(probes.length, 1, statement);
      assert.match(
        probes[0],
        /AS e WITH \(INDEX \(\[events_out_aggregate_idx\]\), FORCESEEK\) WHERE e\.\[source\] = w\.\[source\] AND e\.\[aggregate_id\] = w\.\[aggregate_id\]\n/,
      );
      assert.match(
        probes[0],
        /AND e\.\[aggregate_id\] IS NOT NULL AND e\.\[state\] IN \(N'pending', N'processing'\) AND e\.\[id\] < w\.\[id\]\)$/,
      );
    }
  });

  it('the per-key lookups of a claim state IS NOT NULL, so the filtered key indexes match', () => {
    const outbox = sql.outboxClaimSql(T);
    const byKey = outbox.match(/\w\.\[key\] = @key\b/g) ?? [];
    assert.ok(byKey.length >= 2);
    assert.equal((outbox.match(/(\w)\.\[key\] = @key AND \1\.\[key\] IS NOT NULL/g) ?? []).length, byKey.length);
    for (const statement of [sql.inboxRelayClaimSql(T), sql.inboxPullClaimSql(T)]) {
      const byAggregate = statement.match(/\w\.\[aggregate_id\] = @aggregate\b/g) ?? [];
      assert.ok(byAggregate.length >= 2);
      assert.equal(
        (statement.match(/(\w)\.\[aggregate_id\] = @aggregate AND \1\.\[aggregate_id\] IS NOT NULL/g) ?? []).length,
        byAggregate.length,
      );
    }
  });
});
