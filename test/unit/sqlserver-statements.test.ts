import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { antlr4tsSQL, SQLDialect } from 'antlr4ts-sql';
import type { QueueBoxTables } from '../../lib/dialects/dialect';
import * as postgresClaims from '../../lib/dialects/postgres/claims.sql';
import * as postgresInbox from '../../lib/dialects/postgres/inbox.sql';
import * as admin from '../../lib/dialects/sqlserver/admin.sql';
import * as checks from '../../lib/dialects/sqlserver/checks.sql';
import * as claims from '../../lib/dialects/sqlserver/claims.sql';
import * as followers from '../../lib/dialects/sqlserver/followers.sql';
import * as inbox from '../../lib/dialects/sqlserver/inbox.sql';
import * as instances from '../../lib/dialects/sqlserver/instances.sql';
import * as lease from '../../lib/dialects/sqlserver/lease.sql';
import * as outbox from '../../lib/dialects/sqlserver/outbox.sql';
import { mssqlTable } from '../../lib/dialects/sqlserver/quoting';
import * as retention from '../../lib/dialects/sqlserver/retention.sql';
import {
  ALTER_LOCK_WAIT_MS,
  KEY_COLLATION,
  sqlServerClaimsDown,
  sqlServerClaimsUp,
  sqlServerInstancesDown,
  sqlServerInstancesUp,
  sqlServerKeyCollationDown,
  sqlServerKeyCollationUp,
  sqlServerOperationsDown,
  sqlServerOperationsUp,
  sqlServerRenewalsDown,
  sqlServerRenewalsUp,
  sqlServerSchemaDown,
  sqlServerSchemaUp,
} from '../../lib/dialects/sqlserver/schema';
import { resolveTables } from '../../lib/options/options.resolver';

/** Every SQL Server statement builder: the exports of its *.sql.ts files. */
const sql = { ...outbox, ...inbox, ...claims, ...followers, ...lease, ...checks, ...admin, ...retention };
const postgres = { ...postgresClaims, ...postgresInbox };

// Every T-SQL statement QueueBox sends, checked without a server: it parses with the T-SQL grammar
// of ANTLR's grammars-v4 (the TSqlParser that antlr4ts-sql ships), and its shape is pinned below.
// No SQL Server runs here; docs/sqlserver.md says what was and was not run against one.

/** Syntax errors the T-SQL grammar reports for `statement` (none: it parses). */
function tsqlSyntaxErrors(statement: string): string[] {
  const antlr = new antlr4tsSQL(SQLDialect.TSQL);
  const errors: string[] = [];
  const listener = {
    syntaxError: (_recognizer: unknown, _symbol: unknown, line: number, column: number, message: string) => {
      errors.push(`${line}:${column} ${message.slice(0, 160)}`);
    },
  };
  antlr.getParseTree(antlr.getParser(antlr.getTokens(statement, [listener]), [listener]));
  return errors;
}

const tablesFor = (outbox: string, inbox: string): QueueBoxTables => resolveTables({ outbox, inbox });
const TABLE_SETS = [tablesFor('queuebox_outbox', 'queuebox_inbox'), tablesFor('messaging.events_out', 'messaging.events_in')];

type Builder = (table: string, finished: { state: 'sent' | 'processed'; column: 'sent_at' | 'processed_at' }) => string;

/** The instances table's statements: each takes the instances, outbox and inbox tables. */
function instanceStatements(): { name: string; statement: string; params: number }[] {
  return TABLE_SETS.flatMap((tables) => {
    const [n, o, i] = [mssqlTable(tables.instances), mssqlTable(tables.outbox), mssqlTable(tables.inbox)];
    return [
      { name: `instanceRegisterSql(${n})`, statement: instances.instanceRegisterSql(n), params: 6 },
      { name: `instanceHeartbeatSql(${n})`, statement: instances.instanceHeartbeatSql(n), params: 3 },
      { name: `instanceEndDeadSql(${n})`, statement: instances.instanceEndDeadSql(n, o, i), params: 2 },
      { name: `instanceDeregisterSql(${n})`, statement: instances.instanceDeregisterSql(n, o, i), params: 1 },
      { name: `instanceListSql(${n})`, statement: instances.instanceListSql(n, o, i), params: 0 },
    ];
  });
}

/** The admin and retention builders, whose parameters differ (a component, a kind); `adminStatements` covers them. */
const ADMIN_BUILDERS = new Set([
  'adminBacklogSql',
  'deadLetterListSql',
  'deadLetterCountSql',
  'deadLetterReplaySql',
  'deadLetterDiscardSql',
  'blockedKeyListSql',
  'blockedKeySkipHeadSql',
  'adminThroughputSql',
  'adminClaimListSql',
  'retentionTryLockSql',
  'retentionDeleteSql',
]);

/** Exported fragments of statements, not statements: each is checked inside the statements that use it. */
const FRAGMENTS = new Set(['housekeepingTarget']);

const COMPONENTS = ['outbox', 'inbox'] as const;
const RETENTION_KINDS = ['outbox-sent', 'inbox-processed', 'outbox-dead', 'inbox-dead'] as const;

/** Every variant of every admin and retention statement, for each table set. */
function adminStatements(): { name: string; statement: string }[] {
  return TABLE_SETS.flatMap((tables) => {
    const table = { outbox: mssqlTable(tables.outbox), inbox: mssqlTable(tables.inbox), instances: mssqlTable(tables.instances) };
    return [
      { name: `adminBacklogSql(${table.outbox})`, statement: sql.adminBacklogSql(table.outbox, table.inbox) },
      { name: `adminThroughputSql(${table.outbox})`, statement: sql.adminThroughputSql(table.outbox, table.inbox) },
      { name: 'retentionTryLockSql', statement: sql.retentionTryLockSql() },
      ...COMPONENTS.flatMap((c) => [
        { name: `deadLetterListSql(${table[c]})`, statement: sql.deadLetterListSql(table[c], c, false) },
        { name: `deadLetterListSql(${table[c]}, payload)`, statement: sql.deadLetterListSql(table[c], c, true) },
        { name: `deadLetterListSql(${table[c]}, newest first)`, statement: sql.deadLetterListSql(table[c], c, false, true) },
        { name: `adminClaimListSql(${table[c]})`, statement: sql.adminClaimListSql(table[c], c, table) },
        { name: `deadLetterCountSql(${table[c]})`, statement: sql.deadLetterCountSql(table[c], c) },
        { name: `deadLetterReplaySql(${table[c]})`, statement: sql.deadLetterReplaySql(table[c], c) },
        { name: `deadLetterDiscardSql(${table[c]})`, statement: sql.deadLetterDiscardSql(table[c], c) },
        { name: `blockedKeyListSql(${table[c]})`, statement: sql.blockedKeyListSql(table[c], c, table) },
        { name: `blockedKeySkipHeadSql(${table[c]})`, statement: sql.blockedKeySkipHeadSql(table[c], c) },
      ]),
      ...RETENTION_KINDS.map((kind) => {
        const t = kind.startsWith('outbox') ? table.outbox : table.inbox;
        return { name: `retentionDeleteSql(${t}, ${kind})`, statement: sql.retentionDeleteSql(t, kind) };
      }),
    ];
  });
}

/** Every builder exported by the sqlserver/*.sql.ts files, with each table it can run on; a new builder is covered without a change here. */
function builderStatements(): { name: string; statement: string }[] {
  const builders = Object.entries(sql).filter(
    (entry): entry is [string, Builder] => typeof entry[1] === 'function' && !ADMIN_BUILDERS.has(entry[0]) && !FRAGMENTS.has(entry[0]),
  );
  assert.ok(builders.length >= 18, `found ${builders.length} builders`);
  return builders.flatMap(([name, build]) =>
    TABLE_SETS.flatMap((tables) => [
      { name: `${name}(${mssqlTable(tables.outbox)})`, statement: build(mssqlTable(tables.outbox), { state: 'sent', column: 'sent_at' }) },
      {
        name: `${name}(${mssqlTable(tables.inbox)})`,
        statement: build(mssqlTable(tables.inbox), { state: 'processed', column: 'processed_at' }),
      },
    ]),
  );
}

function schemaStatements(): { name: string; statement: string }[] {
  return TABLE_SETS.flatMap((tables) => [
    ...sqlServerSchemaUp(tables).map((statement, n) => ({ name: `up #${n} (${tables.outbox.qualified})`, statement })),
    ...sqlServerSchemaDown(tables).map((statement, n) => ({ name: `down #${n} (${tables.outbox.qualified})`, statement })),
    ...sqlServerOperationsUp(tables).map((statement, n) => ({ name: `operations up #${n} (${tables.outbox.qualified})`, statement })),
    ...sqlServerOperationsDown(tables).map((statement, n) => ({ name: `operations down #${n} (${tables.outbox.qualified})`, statement })),
    ...sqlServerClaimsUp(tables).map((statement, n) => ({ name: `claims up #${n} (${tables.outbox.qualified})`, statement })),
    ...sqlServerClaimsDown(tables).map((statement, n) => ({
      name: `claims down #${n} (${tables.outbox.qualified})`,
      statement,
    })),
    ...sqlServerKeyCollationUp(tables).map((statement, n) => ({ name: `key collation up #${n} (${tables.outbox.qualified})`, statement })),
    ...sqlServerKeyCollationDown(tables).map((statement, n) => ({
      name: `key collation down #${n} (${tables.outbox.qualified})`,
      statement,
    })),
    ...sqlServerInstancesUp(tables).map((statement, n) => ({ name: `instances up #${n} (${tables.outbox.qualified})`, statement })),
    ...sqlServerInstancesDown(tables).map((statement, n) => ({ name: `instances down #${n} (${tables.outbox.qualified})`, statement })),
    ...sqlServerRenewalsUp(tables).map((statement, n) => ({ name: `renewals up #${n} (${tables.outbox.qualified})`, statement })),
    ...sqlServerRenewalsDown(tables).map((statement, n) => ({ name: `renewals down #${n} (${tables.outbox.qualified})`, statement })),
  ]);
}

const ALL = [...schemaStatements(), ...builderStatements(), ...adminStatements(), ...instanceStatements()];
const T = '[messaging].[events_out]';
const FINISHED_SENT = { state: 'sent', column: 'sent_at' } as const;
const FENCE = "[id] = @0 AND [state] = N'processing' AND [claim_token] = @1 AND [lease_expires_at] > SYSUTCDATETIME()";

/** The placeholders a statement uses, as numbers, sorted and without repeats. */
const placeholders = (statement: string) =>
  [...new Set([...statement.matchAll(/@(\d+)\b/g)].map((m) => Number(m[1])))].sort((a, b) => a - b);

describe('SQL Server statements parse as T-SQL', () => {
  it('the grammar rejects what is not T-SQL (so a clean parse means something)', () => {
    for (const statement of [
      postgres.outboxClaimSql('"queuebox_outbox"'), // LIMIT, FOR UPDATE SKIP LOCKED, RETURNING
      postgres.inboxInsertSql('"queuebox_inbox"'), // ON CONFLICT, ::jsonb
      'UPDATE [t] SET [a] = 1 WHERE [id] = @0 OUTPUT inserted.[a]', // OUTPUT after WHERE
      "EXEC sp_getapplock @Resource = , @LockMode = N'Exclusive'",
      'SELECT TOP 5 [id] FROM [t] ORDER BY [id] LIMIT 5',
      'CREATE SCHEMA IF NOT EXISTS [messaging]',
    ]) {
      assert.notDeepEqual(tsqlSyntaxErrors(statement), [], `expected a syntax error in: ${statement}`);
    }
  });

  for (const { name, statement } of ALL) {
    it(name, () => {
      assert.deepEqual(tsqlSyntaxErrors(statement), [], statement);
    });
  }
});

describe('SQL Server statements: pinned shape', () => {
  it('uses the database clock in UTC, SYSUTCDATETIME(), and never another clock', () => {
    for (const { name, statement } of ALL) {
      assert.doesNotMatch(statement, /GETDATE|GETUTCDATE|CURRENT_TIMESTAMP|SYSDATETIME\(|SYSDATETIMEOFFSET|now\(|clock_timestamp/i, name);
    }
    for (const build of [sql.outboxClaimSql, sql.inboxRelayClaimSql, sql.inboxPullClaimSql, sql.leaseRenewSql, sql.leaseRetrySql]) {
      assert.match(build(T), /SYSUTCDATETIME\(\)/);
    }
  });

  it('fences every finishing write on id, processing, token and a lease later than now', () => {
    for (const statement of [
      sql.leaseRenewSql(T),
      sql.leaseCompleteSql(T, FINISHED_SENT),
      sql.leaseCompleteSql(T, { state: 'processed', column: 'processed_at' }),
      sql.leaseRetrySql(T),
      sql.leaseDeadLetterSql(T),
      sql.leaseReleaseSql(T),
    ]) {
      assert.ok(statement.endsWith(`WHERE ${FENCE}`), statement);
    }
    assert.match(
      sql.leaseCompleteBatchSql(T, FINISHED_SENT),
      /WHERE t\.\[state\] = N'processing' AND t\.\[claim_token\] = c\.\[token\] AND t\.\[lease_expires_at\] > SYSUTCDATETIME\(\)$/,
    );
    assert.match(
      sql.leaseCompleteSql(T, FINISHED_SENT),
      /SET \[state\] = N'sent', \[sent_at\] = SYSUTCDATETIME\(\), \[lease_expires_at\] = NULL/,
    );
    assert.match(sql.leaseRenewSql(T), /OUTPUT TODATETIMEOFFSET\(inserted\.\[lease_expires_at\], '\+00:00'\)/);
  });

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
    for (const { name, statement } of ALL) assert.doesNotMatch(statement, /N'Session'/, name);
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
      assert.doesNotMatch(statement, /SET LOCK_TIMEOUT -1/, 'issue 26 N9: no reset, the batch scope restores it');
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
    // A page is PostgreSQL's window (the claim reads more than one on SQL Server; see issue 38 M2 below).
    assert.equal(sql.CLAIM_SCAN_WINDOW, postgres.CLAIM_SCAN_WINDOW);
    for (const statement of [sql.outboxClaimSql(T), sql.inboxRelayClaimSql(T), sql.inboxPullClaimSql(T)]) {
      assert.match(statement, new RegExp(`SELECT TOP \\(${sql.CLAIM_SCAN_WINDOW}\\) \\w\\.\\[available_at\\], \\w\\.\\[id\\]`));
    }
    // A pull claim takes expired claims directly, and pending rows only when available.
    assert.match(sql.inboxPullClaimSql(T), /i\.\[state\] = N'processing' AND i\.\[lease_expires_at\] <= SYSUTCDATETIME\(\)/);
    assert.match(sql.inboxPullClaimSql(T), /i\.\[state\] = N'pending' AND i\.\[available_at\] <= SYSUTCDATETIME\(\)/);
  });

  it('numbers parameters @0..@n-1 with none skipped, as documented per statement', () => {
    const expected: Record<string, number> = {
      outboxClaimSql: 4,
      outboxReclaimSql: 1,
      outboxInsertSql: 1,
      outboxInsertIfAbsentSql: 1,
      outboxFindSql: 1,
      rateLimitTakeSql: 4,
      leaseDeferSql: 3,
      leaseRenewSql: 3,
      leaseCompleteSql: 2,
      leaseCompleteBatchSql: 1,
      leaseReleaseSql: 2,
      leaseRetrySql: 4,
      leaseDeadLetterSql: 3,
      inboxInsertSql: 5,
      inboxFindSql: 2,
      inboxRelayClaimSql: 5,
      inboxReclaimSql: 2,
      inboxPullClaimSql: 5,
      tableExistsSql: 1,
      databaseSettingsSql: 0,
      inboxFollowersSql: 2,
      inboxCompleteFollowersSql: 1,
      keyCollationSql: 1,
      clockNowSql: 0,
    };
    const builders = Object.entries(sql).filter(
      ([name, value]) => typeof value === 'function' && !ADMIN_BUILDERS.has(name) && !FRAGMENTS.has(name),
    ) as [string, Builder][];
    assert.deepEqual(builders.map(([name]) => name).sort(), Object.keys(expected).sort(), 'every builder has its parameter count here');
    for (const [name, build] of builders) {
      const used = placeholders(build(T, FINISHED_SENT));
      assert.deepEqual(
        used,
        Array.from({ length: expected[name] }, (_, n) => n),
        name,
      );
    }
    assert.doesNotMatch(ALL.map((s) => s.statement).join('\n'), /\$\d/, 'no PostgreSQL placeholders');
  });

  it('quotes every identifier with brackets, schema-qualified names included, and compares text as NVARCHAR', () => {
    const qualified = tablesFor('messaging.events_out', 'messaging.events_in');
    const up = sqlServerSchemaUp(qualified);
    assert.equal(mssqlTable(qualified.outbox), '[messaging].[events_out]');
    assert.equal(mssqlTable(tablesFor('queuebox_outbox', 'queuebox_inbox').outbox), '[queuebox_outbox]');
    assert.deepEqual(
      up.filter((s) => s.includes('SCHEMA')),
      ["IF SCHEMA_ID(N'messaging') IS NULL EXEC(N'CREATE SCHEMA [messaging]')"],
      'one schema, created once, only when missing',
    );
    assert.ok(up.some((s) => s.startsWith('CREATE TABLE [messaging].[events_out] (')));
    assert.ok(up.some((s) => s.startsWith('CREATE TABLE [messaging].[events_in] (')));
    assert.deepEqual(sqlServerSchemaDown(qualified), [
      'DROP TABLE IF EXISTS [messaging].[events_in]',
      'DROP TABLE IF EXISTS [messaging].[events_out]',
    ]);
    for (const { name, statement } of ALL) {
      // JSON paths quote keys with hyphens ('$."X-QueueBox-Replay-Count"'): a string literal, not an identifier.
      assert.doesNotMatch(statement.replace(/'\$\."[A-Za-z-]+"'/g, ''), /"/, `${name}: no double-quoted identifiers`);
      // Inside EXEC (N'...') a literal's quotes are doubled: N''pending''.
      assert.doesNotMatch(
        statement.replaceAll("''", "'"),
        /(?<![N\w])'(pending|processing|sent|processed|dead)'/,
        `${name}: state literals are N'...'`,
      );
      assert.doesNotMatch(statement, /\bVARCHAR\b|\bTEXT\b/, `${name}: text is NVARCHAR`);
    }
    assert.equal(up.filter((s) => s.includes('@')).length, 0, 'the schema takes no parameters');
  });

  it('the schema: NVARCHAR text, DATETIME2 by SYSUTCDATETIME(), UNIQUEIDENTIFIER, JSON checks, filtered and unique in-flight indexes', () => {
    const up = sqlServerSchemaUp(tablesFor('queuebox_outbox', 'queuebox_inbox')).join('\n');
    for (const column of [
      '[id] BIGINT IDENTITY(1, 1) NOT NULL',
      '[message_id] UNIQUEIDENTIFIER NOT NULL',
      '[destination] NVARCHAR(255) NOT NULL',
      '[key] NVARCHAR(255) NULL',
      '[source] NVARCHAR(255) NOT NULL',
      '[idempotency_key] NVARCHAR(255) NOT NULL',
      '[aggregate_id] NVARCHAR(255) NULL',
      '[payload] NVARCHAR(MAX) NOT NULL',
      '[claim_token] UNIQUEIDENTIFIER NULL',
      "[state] NVARCHAR(16) NOT NULL CONSTRAINT [queuebox_outbox_state_default] DEFAULT N'pending'",
      '[available_at] DATETIME2 NOT NULL CONSTRAINT [queuebox_outbox_available_at_default] DEFAULT SYSUTCDATETIME()',
      '[lease_expires_at] DATETIME2 NULL',
      "CONSTRAINT [queuebox_outbox_payload_check] CHECK (ISJSON(N'[' + [payload] + N']') = 1)",
      'CONSTRAINT [queuebox_inbox_headers_check] CHECK (ISJSON([headers]) = 1)',
      'CONSTRAINT [queuebox_inbox_source_idempotency_key_key] UNIQUE ([source], [idempotency_key])',
      'CONSTRAINT [queuebox_outbox_message_id_key] UNIQUE ([message_id])',
    ]) {
      assert.ok(up.includes(column), column);
    }
    for (const index of [
      "CREATE INDEX [queuebox_outbox_claim_idx] ON [queuebox_outbox] ([available_at], [id]) INCLUDE ([key]) WHERE [state] = N'pending'",
      "CREATE UNIQUE INDEX [queuebox_outbox_key_in_flight_idx] ON [queuebox_outbox] ([key]) WHERE [state] = N'processing' AND [key] IS NOT NULL",
      "CREATE UNIQUE INDEX [queuebox_inbox_aggregate_in_flight_idx] ON [queuebox_inbox] ([source], [aggregate_id]) WHERE [state] = N'processing' AND [aggregate_id] IS NOT NULL",
      "CREATE INDEX [queuebox_outbox_lease_idx] ON [queuebox_outbox] ([lease_expires_at]) WHERE [state] = N'processing'",
      'ALTER TABLE [queuebox_outbox] SET (LOCK_ESCALATION = DISABLE)',
    ]) {
      assert.ok(up.includes(index), index);
    }
    // Every index but the primary keys and the unique constraints is filtered to unfinished rows.
    for (const statement of up.split('\n').filter((line) => line.startsWith('CREATE') && line.includes('INDEX'))) {
      assert.match(statement, / WHERE \[state\] (=|IN)/, statement);
    }
  });

  it('the batch insert is one statement with one JSON parameter, identities in input order', () => {
    const statement = sql.outboxInsertSql(T);
    assert.match(statement, /FROM OPENJSON\(@0\) AS j\nCROSS APPLY OPENJSON\(j\.\[value\]\) WITH \(/);
    assert.match(statement, /ORDER BY CAST\(j\.\[key\] AS INT\)$/);
    assert.match(statement, /OUTPUT inserted\.\[id\], inserted\.\[message_id\]/);
  });

  it('the inbox insert lets the unique constraint decide, takes no range lock, and answers a duplicate with no row (issue 38 M3)', () => {
    const statement = sql.inboxInsertSql(T);
    assert.doesNotMatch(statement, /UPDLOCK|HOLDLOCK|SERIALIZABLE|NOT EXISTS/, 'no lock on the range of keys after this one');
    assert.equal(
      statement,
      `SET XACT_ABORT OFF;
SET NOCOUNT ON;
DECLARE @inserted TABLE ([id] BIGINT NOT NULL);
BEGIN TRY
  INSERT INTO [messaging].[events_out] WITH (ROWLOCK) ([source], [idempotency_key], [aggregate_id], [payload], [headers])
  OUTPUT inserted.[id] INTO @inserted ([id])
  VALUES (@0, @1, @2, @3, @4);
END TRY
BEGIN CATCH
  IF ERROR_NUMBER() NOT IN (2601, 2627) OR XACT_STATE() = -1
    THROW;
END CATCH;
SELECT [id] FROM @inserted;`,
    );
    // XACT_ABORT OFF before anything else: a duplicate must not doom the caller's transaction.
    assert.ok(statement.startsWith('SET XACT_ABORT OFF;\n'));
    assert.deepEqual([...sql.UNIQUE_VIOLATIONS], [2601, 2627]);
  });

  it("the insert of onDuplicate: 'ignore' lets the unique constraint decide, takes no range lock, and falls back to one row at a time in input order", () => {
    const statement = sql.outboxInsertIfAbsentSql(T);
    assert.doesNotMatch(statement, /UPDLOCK|HOLDLOCK|SERIALIZABLE/, 'no lock on the range of ids around each new one');
    // XACT_ABORT OFF before anything else: a caught duplicate must not doom the caller's transaction.
    assert.ok(statement.startsWith('SET XACT_ABORT OFF;\nSET NOCOUNT ON;\n'), statement);
    // The batch is the plain insert's rows, past the ids already committed, into the table variable.
    const rows = sql.outboxInsertSql(T).split('\n').slice(2, -1).join('\n');
    const batch = statement.slice(statement.indexOf('BEGIN TRY'), statement.indexOf('END TRY'));
    assert.ok(batch.includes(`  ${rows}`), batch);
    assert.match(batch, /OUTPUT inserted\.\[id\], inserted\.\[message_id\] INTO @inserted/);
    assert.match(
      batch,
      /WHERE NOT EXISTS \(SELECT 1 FROM \[messaging\]\.\[events_out\] AS o WHERE o\.\[message_id\] = m\.\[message_id\]\)\n {2}ORDER BY CAST\(j\.\[key\] AS INT\);/,
    );
    // Only a unique violation is caught, twice (the batch, then each row); anything else, or a doomed transaction, is thrown.
    assert.equal(statement.match(/IF ERROR_NUMBER\(\) NOT IN \(2601, 2627\) OR XACT_STATE\(\) = -1\n\s+THROW;/g)?.length, 2);
    // The fallback forgets what the failed batch may have output, then inserts row @row of the array, for @row = 0, 1, ...
    assert.match(
      statement,
      /BEGIN CATCH\n[\s\S]*?DELETE FROM @inserted;\n {2}DECLARE @row INT = 0;[\s\S]*WHILE @row < @rows[\s\S]*WHERE CAST\(j\.\[key\] AS INT\) = @row\n[\s\S]*SET @row \+= 1;/,
    );
    assert.ok(statement.endsWith('SELECT [id], [message_id] FROM @inserted ORDER BY [id];'));
    assert.match(sql.outboxFindSql(T), /WHERE \[message_id\] IN \(SELECT CAST\(\[value\] AS UNIQUEIDENTIFIER\) FROM OPENJSON\(@0\)\)$/);
  });
});

describe('SQL Server housekeeping never waits for a row, and loses its deadlocks (issue 38 M1)', () => {
  const [n, o, i] = ['[queuebox_instances]', '[messaging].[events_out]', '[messaging].[events_in]'];
  const HOUSEKEEPING = 'SET DEADLOCK_PRIORITY LOW;\nSET LOCK_TIMEOUT 2000;\n';

  it('the dead-instance sweep and deregistration: low deadlock priority, a 2 s lock wait, READPAST on every table they change', () => {
    for (const statement of [instances.instanceEndDeadSql(n, o, i), instances.instanceDeregisterSql(n, o, i)]) {
      assert.ok(statement.startsWith(`${HOUSEKEEPING}SET XACT_ABORT ON;\n`), statement);
      for (const [table, index] of [
        [o, 'events_out_lease_idx'],
        [i, 'events_in_lease_idx'],
      ]) {
        assert.ok(
          statement.includes(`\n  FROM ${table} AS t WITH (ROWLOCK, READPAST, INDEX ([${index}]))\n  WHERE t.[state] = N'processing'`),
          `${table}: ${statement}`,
        );
      }
      assert.equal((statement.match(/^UPDATE t /gm) ?? []).length, 2, 'no other UPDATE');
    }
    assert.ok(
      instances.instanceEndDeadSql(n, o, i).includes(`\n  FROM ${n} AS n WITH (READPAST)\n  WHERE n.[heartbeat_at] <`),
      'a second sweep passes over the first',
    );
  });

  it('the reclaims: the same, through the lease index', () => {
    assert.equal(
      sql.outboxReclaimSql(o),
      `${HOUSEKEEPING}UPDATE t
SET [state] = CASE WHEN [attempts] >= @0 THEN N'dead' ELSE N'pending' END,
    [claim_token] = NULL, [lease_expires_at] = NULL,
    [last_error] = CONCAT(N'lease expired on attempt ', [attempts], N' of ', @0,
      N': the worker crashed, was stopped or outlived its lease')
OUTPUT inserted.[state], inserted.[destination] AS [name]
FROM ${o} AS t WITH (ROWLOCK, READPAST, INDEX ([events_out_lease_idx]))
WHERE t.[state] = N'processing' AND t.[lease_expires_at] <= SYSUTCDATETIME()`,
    );
    assert.match(
      sql.inboxReclaimSql(i),
      /^SET DEADLOCK_PRIORITY LOW;\nSET LOCK_TIMEOUT 2000;\nUPDATE t\n[\s\S]*\nFROM \[messaging\]\.\[events_in\] AS t WITH \(ROWLOCK, READPAST, INDEX \(\[events_in_lease_idx\]\)\)\nWHERE t\.\[state\] = N'processing' AND t\.\[lease_expires_at\] <= SYSUTCDATETIME\(\)\n {2}AND t\.\[source\] IN \(/,
    );
  });
});

describe('SQL Server admin and retention statements: pinned shape', () => {
  const O = '[messaging].[events_out]';
  const I = '[messaging].[events_in]';

  it("numbers the instances statements' parameters @0..@n-1 as documented", () => {
    for (const { name, statement, params } of instanceStatements()) {
      assert.deepEqual(
        placeholders(statement),
        Array.from({ length: params }, (_, n) => n),
        name,
      );
    }
  });

  it('numbers parameters @0..@n-1 as documented', () => {
    const expected: [string, string, number][] = [
      ['backlog', sql.adminBacklogSql(O, I), 0],
      ['list', sql.deadLetterListSql(O, 'outbox', false), 8],
      ['list newest first', sql.deadLetterListSql(I, 'inbox', true, true), 8],
      ['count', sql.deadLetterCountSql(I, 'inbox'), 6],
      ['replay', sql.deadLetterReplaySql(O, 'outbox'), 8],
      ['discard', sql.deadLetterDiscardSql(I, 'inbox'), 8],
      ['throughput', sql.adminThroughputSql(O, I), 1],
      ['claims', sql.adminClaimListSql(O, 'outbox', { instances: '[queuebox_instances]', outbox: O, inbox: I }), 1],
      ['blocked', sql.blockedKeyListSql(O, 'outbox', { instances: '[queuebox_instances]', outbox: O, inbox: I }), 1],
      ['skip outbox', sql.blockedKeySkipHeadSql(O, 'outbox'), 3],
      ['skip inbox', sql.blockedKeySkipHeadSql(I, 'inbox'), 4],
      ['retention lock', sql.retentionTryLockSql(), 1],
      ['retention delete', sql.retentionDeleteSql(O, 'outbox-sent'), 2],
    ];
    for (const [name, statement, count] of expected) {
      assert.deepEqual(
        placeholders(statement),
        Array.from({ length: count }, (_, n) => n),
        name,
      );
    }
  });

  it('replay and discard change dead rows only: selected as dead and re-checked in the write', () => {
    for (const c of COMPONENTS) {
      for (const statement of [sql.deadLetterReplaySql(O, c), sql.deadLetterDiscardSql(O, c)]) {
        assert.match(statement, /WITH \[batch\] AS \(\n {2}SELECT TOP \(@7\) /);
        assert.match(statement, /WHERE \[state\] = N'dead'\n {2}AND \(@0 IS NULL OR /, 'the batch holds dead rows only');
        assert.match(statement, /\nWHERE \[state\] = N'dead'\nOPTION \(RECOMPILE\)$/, 'the write re-checks dead');
        assert.match(statement, /AND \(@6 IS NULL OR \[id\] > @6\)\n {2}ORDER BY \[id\]/, 'keyset batches in id order');
        assert.match(
          statement,
          new RegExp(`AND \\(@5 IS NULL OR \\[${c === 'outbox' ? 'key' : 'aggregate_id'}\\] = @5\\)`),
          'the key filter',
        );
      }
      assert.match(sql.deadLetterListSql(O, c, false), /^SELECT TOP \(@7\) .*\nFROM .*\nWHERE \[state\] = N'dead'/s);
      assert.match(sql.deadLetterListSql(O, c, false, true), /AND \(@6 IS NULL OR \[id\] < @6\)\nORDER BY \[id\] DESC\n/, 'newest first');
      assert.doesNotMatch(sql.deadLetterListSql(O, c, false), /\[payload\]/, 'no payload unless asked');
      assert.match(sql.deadLetterListSql(O, c, true), /, \[payload\]\n/);
    }
    const replay = sql.deadLetterReplaySql(O, 'outbox');
    assert.match(replay, /SET \[state\] = N'pending', \[attempts\] = 0, \[available_at\] = SYSUTCDATETIME\(\), \[claim_token\] = NULL/);
    assert.match(replay, /JSON_MODIFY\(\[headers\], '\$\."X-QueueBox-Replay-Count"'/);
    assert.match(replay, /'\$\."X-QueueBox-Replayed-At"', CONVERT\(NVARCHAR\(23\), SYSUTCDATETIME\(\), 126\) \+ N'Z'\)/);
    assert.doesNotMatch(replay, /\[message_id\]/, 'the message id is never rewritten');
  });

  it('skip-head locks the head row before any index entry of it, and never takes a live claim (database clock; issue 26 L2)', () => {
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

  it('instance states: dead exactly as the sweep deletes (past its deadline, renewing none of its leases within it), silent after two thirds of dead_after_ms, by SYSUTCDATETIME()', () => {
    const N = '[messaging].[queuebox_instances]';
    const tables = { instances: N, outbox: O, inbox: I };
    const pastDeadline = 'n.[heartbeat_at] < DATEADD(MILLISECOND, -n.[dead_after_ms], SYSUTCDATETIME())';
    const renews = (table: string) =>
      `EXISTS (SELECT 1 FROM ${table} AS t\n      WHERE t.[state] = N'processing' AND t.[claimed_by] = n.[id] AND t.[lease_expires_at] > SYSUTCDATETIME()`;
    const dead = `${pastDeadline} AND NOT ${renews(O)}`;
    const state = instances.instanceState('n', tables);
    assert.ok(state.startsWith(`CASE WHEN ${dead}`), state);
    assert.ok(state.includes(`AND NOT ${renews(I)}`), state);
    assert.ok(
      state.endsWith(
        "THEN N'dead'\n            WHEN n.[heartbeat_at] < DATEADD(MILLISECOND, -(n.[dead_after_ms] * 2 / 3), SYSUTCDATETIME()) THEN N'silent'\n            ELSE N'alive' END",
      ),
      state,
    );
    const deadRule = state.slice('CASE WHEN '.length, state.indexOf(" THEN N'dead'"));
    assert.ok(
      instances.instanceEndDeadSql(N, O, I).includes(`WHERE ${deadRule} AND n.[id] <> @1;`),
      'the sweep deletes what the views call dead, no more, no less (but never its caller)',
    );
    const list = instances.instanceListSql(N, O, I);
    assert.ok(list.includes(`${state} AS [state],`), list);
    assert.doesNotMatch(list, /\[alive\]/);
  });

  it('blocked keys and claims name an owner only while the row is held (processing, lease later than now); the last claimer always (issue 34)', () => {
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

  it('retention: a transaction-owned lock that is never waited for, and small deletes of one state', () => {
    assert.equal(
      sql.retentionTryLockSql(),
      `DECLARE @granted INT;
EXEC @granted = sp_getapplock @Resource = @0, @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 0;
SELECT @granted AS [granted];`,
    );
    const states = { 'outbox-sent': 'sent', 'inbox-processed': 'processed', 'outbox-dead': 'dead', 'inbox-dead': 'dead' } as const;
    for (const kind of RETENTION_KINDS) {
      const statement = sql.retentionDeleteSql(O, kind);
      assert.ok(
        statement.startsWith(
          `SET NOCOUNT OFF;\nDELETE TOP (@1) FROM ${O} WITH (ROWLOCK, READPAST)\nWHERE [state] = N'${states[kind]}' AND `,
        ),
        statement,
      );
      assert.match(
        statement,
        /< DATEADD\(MILLISECOND, -CAST\(@0 % 1000 AS INT\), DATEADD\(SECOND, -CAST\(@0 \/ 1000 AS INT\), SYSUTCDATETIME\(\)\)\)$/,
      );
    }
  });

  it('the operations migration: filtered indexes on finished and dead rows only', () => {
    const up = sqlServerOperationsUp(tablesFor('queuebox_outbox', 'queuebox_inbox'));
    assert.deepEqual(up.slice(2), [
      "CREATE INDEX [queuebox_outbox_sent_idx] ON [queuebox_outbox] ([sent_at]) WHERE [state] = N'sent'",
      "CREATE INDEX [queuebox_outbox_dead_idx] ON [queuebox_outbox] ([destination], [id]) WHERE [state] = N'dead'",
      "CREATE INDEX [queuebox_inbox_processed_idx] ON [queuebox_inbox] ([processed_at]) WHERE [state] = N'processed'",
      "CREATE INDEX [queuebox_inbox_dead_idx] ON [queuebox_inbox] ([source], [id]) WHERE [state] = N'dead'",
    ]);
    assert.deepEqual(sqlServerOperationsDown(tablesFor('messaging.events_out', 'messaging.events_in')), [
      'DROP INDEX IF EXISTS [events_in_dead_idx] ON [messaging].[events_in]',
      'DROP INDEX IF EXISTS [events_in_processed_idx] ON [messaging].[events_in]',
      'DROP INDEX IF EXISTS [events_out_dead_idx] ON [messaging].[events_out]',
      'DROP INDEX IF EXISTS [events_out_sent_idx] ON [messaging].[events_out]',
    ]);
  });
});

describe('SQL Server key collation (migration 004): distinct keys stay distinct', () => {
  const tables = tablesFor('messaging.events_out', 'messaging.events_in');
  const KEY_COLUMNS = { outbox: ['destination', 'key'], inbox: ['source', 'idempotency_key', 'aggregate_id'] } as const;
  const earlier = [...sqlServerSchemaUp(tables), ...sqlServerOperationsUp(tables), ...sqlServerClaimsUp(tables)];
  const indexName = (statement: string) => /^CREATE (?:UNIQUE )?INDEX \[([^\]]+)\]/.exec(statement)?.[1];

  it('moves every compared key column to Latin1_General_100_BIN2 with its 001 type and nullability, and back on down', () => {
    assert.equal(KEY_COLLATION, 'Latin1_General_100_BIN2');
    const up = sqlServerKeyCollationUp(tables);
    assert.deepEqual(
      up.filter((s) => s.includes('ALTER COLUMN')),
      [
        '[messaging].[events_out] ALTER COLUMN [destination] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL',
        '[messaging].[events_out] ALTER COLUMN [key] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NULL',
        '[messaging].[events_in] ALTER COLUMN [source] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL',
        '[messaging].[events_in] ALTER COLUMN [idempotency_key] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL',
        '[messaging].[events_in] ALTER COLUMN [aggregate_id] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NULL',
      ].map((s) => `ALTER TABLE ${s}`),
    );
    const created = sqlServerSchemaUp(tables).join('\n');
    for (const [kind, columns] of Object.entries(KEY_COLUMNS)) {
      for (const column of columns) {
        assert.match(created, new RegExp(`\\[${column}\\] NVARCHAR\\(255\\) (NOT )?NULL`), `${kind}.${column} as 001 declares it`);
      }
    }
    assert.ok(
      sqlServerKeyCollationDown(tables)
        .filter((s) => s.includes('ALTER COLUMN'))
        .every((s) => s.includes('COLLATE DATABASE_DEFAULT')),
    );
  });

  it('drops every index of 001-003 that depends on a key column (key, INCLUDE or filter) and creates it again exactly', () => {
    for (const statements of [sqlServerKeyCollationUp(tables), sqlServerKeyCollationDown(tables)]) {
      const dependent = earlier.filter((s) => indexName(s) && /\[(destination|key|source|idempotency_key|aggregate_id)\]/.test(s));
      assert.ok(dependent.length >= 11, `found ${dependent.length} dependent indexes`);
      const alters = statements.map((s, n) => (s.includes('ALTER COLUMN') ? n : -1)).filter((n) => n >= 0);
      for (const index of dependent) {
        const name = indexName(index) as string;
        const on = index.includes('[events_out]') ? '[messaging].[events_out]' : '[messaging].[events_in]';
        const dropAt = statements.indexOf(`DROP INDEX IF EXISTS [${name}] ON ${on}`);
        const createAt = statements.findIndex((s) => s.endsWith(`EXEC (N'${index.replaceAll("'", "''")}' + @online)`));
        const columnAlters = alters.filter((n) => statements[n].startsWith(`ALTER TABLE ${on}`));
        assert.ok(dropAt >= 0 && dropAt < Math.min(...columnAlters), `${name} dropped before its table's columns change`);
        assert.ok(createAt > Math.max(...columnAlters), `${name} created again, as 001-003 do, after the change`);
      }
      // Indexes on other columns only are left alone.
      assert.ok(!statements.some((s) => s.includes('events_out_lease_idx') || s.includes('events_out_sent_idx')));
      const unique = 'CONSTRAINT [events_in_source_idempotency_key_key]';
      const dropUnique = statements.indexOf(`ALTER TABLE [messaging].[events_in] DROP ${unique}`);
      const addUnique = statements.indexOf(`ALTER TABLE [messaging].[events_in] ADD ${unique} UNIQUE ([source], [idempotency_key])`);
      const inboxAlters = alters.filter((n) => statements[n].startsWith('ALTER TABLE [messaging].[events_in]'));
      assert.ok(
        dropUnique >= 0 && dropUnique < Math.min(...inboxAlters) && addUnique > Math.max(...inboxAlters),
        'the dedupe constraint too',
      );
      assert.deepEqual(statements.slice(0, 2), ['SET ANSI_NULLS ON', 'SET QUOTED_IDENTIFIER ON']);
    }
  });

  it('statements compare key columns only with parameters, variables or text that names the key collation (never error 468)', () => {
    for (const statement of [sql.inboxRelayClaimSql(T), sql.inboxPullClaimSql(T)]) {
      assert.match(
        statement,
        /DECLARE @sources TABLE \(\[n\] INT IDENTITY\(1, 1\) PRIMARY KEY, \[source\] NVARCHAR\(255\) COLLATE Latin1_General_100_BIN2 NOT NULL\);/,
      );
    }
    assert.match(sql.inboxReclaimSql(T), /\[source\] IN \(SELECT s\.\[source\] COLLATE Latin1_General_100_BIN2 FROM OPENJSON\(@1\)/);
    // No other table variable or OPENJSON column is compared with a key column.
    for (const { name, statement } of ALL) {
      for (const match of statement.matchAll(/DECLARE @\w+ TABLE \(([^;]*)\);/g)) {
        if (/NVARCHAR/.test(match[1])) assert.match(match[1], /COLLATE Latin1_General_100_BIN2/, name);
      }
    }
  });
});

describe('SQL Server statements: seeks, counts and filtered indexes (issue 14, item 8)', () => {
  const CLAIMS = [sql.outboxClaimSql(T), sql.inboxRelayClaimSql(T), sql.inboxPullClaimSql(T)];

  it('(a) every locked read of a claim, the batch completion and the followers completion force a seek on the index meant (issue 26 N5)', () => {
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
    for (const { name, statement } of ALL) {
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

  it("(f) every claim's UPDATE reaches its candidates by primary-key seeks, never a scan that waits for an open producer's row (issue 38 H1)", () => {
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

  it('(g) the "earlier unfinished row" probes seek the key or aggregate index, whatever its statistics say (issue 38 L2)', () => {
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

  it('(b) every statement whose affected-row count decides a fence, or ends retention, sets NOCOUNT OFF first', () => {
    const counted = [
      sql.leaseCompleteSql(T, FINISHED_SENT),
      sql.leaseReleaseSql(T),
      sql.leaseRetrySql(T),
      sql.leaseDeadLetterSql(T),
      ...RETENTION_KINDS.map((kind) => sql.retentionDeleteSql(T, kind)),
    ];
    for (const statement of counted) assert.ok(statement.startsWith('SET NOCOUNT OFF;\n'), statement.slice(0, 60));
  });

  it('(e) the per-key lookups of a claim state IS NOT NULL, so the filtered key indexes match', () => {
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

/**
 * The statements a claim or a followers read runs in a TRY that passes over a row-lock timeout
 * (error 1222) and nothing else, each with what it does instead (its CATCH's last line, if any).
 */
function lockTolerant(statement: string): { body: string; orElse: string | undefined }[] {
  const blocks = statement.matchAll(
    /BEGIN TRY\n((?:(?!BEGIN TRY)[\s\S])*?)\nEND TRY\nBEGIN CATCH\n {2}IF ERROR_NUMBER\(\) <> 1222 OR XACT_STATE\(\) = -1\n {4}THROW;\n(?: {2}(.*)\n)?END CATCH;/g,
  );
  return [...blocks].map((m) => ({ body: m[1], orElse: m[2] }));
}

describe('SQL Server claims keep what they found when a row lock is met (issue 26 N1, M5)', () => {
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

describe('SQL Server claims cost what their heads cost, not what the keys cost (issue 38 M2)', () => {
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

describe('SQL Server followers (issue 26 N2, N5, N6, N8)', () => {
  const I = '[messaging].[events_in]';

  it('the read waits at most 500 ms for a row lock and then hands out no follower, leaving the transaction usable', () => {
    const statement = sql.inboxFollowersSql(I);
    assert.equal(sql.FOLLOWERS_LOCK_WAIT_MS, 500);
    assert.ok(statement.startsWith('SET XACT_ABORT OFF;\nSET LOCK_TIMEOUT 500;\n'), statement);
    const blocks = lockTolerant(statement);
    assert.equal(blocks.length, 1);
    assert.match(blocks[0].body, /^ {2}INSERT INTO @followers /);
    assert.equal(blocks[0].orElse, 'DELETE FROM @followers;', 'all or nothing: no follower after a lock timeout');
    // Sent only once complete, and from the table variable alone: nothing after the CATCH reads the table.
    const after = statement.slice(statement.indexOf('END CATCH;'));
    assert.match(after, /\nFROM @followers$/);
    assert.doesNotMatch(after, new RegExp(I.replace(/[[\]]/g, '\\$&')));
  });

  it('the read states the aggregate index filter literally, and still checks the head is first of its aggregate', () => {
    const statement = sql.inboxFollowersSql(I);
    assert.match(
      statement,
      /AND i\.\[aggregate_id\] IS NOT NULL AND i\.\[state\] IN \(N'pending', N'processing'\) AND i\.\[state\] = N'pending' AND i\.\[id\] > h\.\[id\]\n {4}ORDER BY i\.\[id\]/,
    );
    assert.match(
      statement,
      /WHERE NOT EXISTS \(SELECT 1 FROM \[messaging\]\.\[events_in\] AS e\n.*AND e\.\[aggregate_id\] IS NOT NULL AND e\.\[state\] IN \(N'pending', N'processing'\) AND e\.\[id\] < h\.\[id\]\);/s,
    );
    assert.match(statement, /SELECT TOP \(@1\) i\.\[id\]/);
  });

  it('the completion is fenced by the head: processed under that token, same aggregate, lower id', () => {
    const statement = sql.inboxCompleteFollowersSql(I);
    assert.ok(statement.startsWith('SET NOCOUNT OFF;\nUPDATE t\n'));
    assert.match(
      statement,
      /OPENJSON\(@0\) WITH \(\[id\] BIGINT '\$\.id', \[head_id\] BIGINT '\$\.headId', \[head_token\] UNIQUEIDENTIFIER '\$\.headToken'\) AS c/,
    );
    assert.ok(
      statement.endsWith(`WHERE t.[state] = N'pending' AND h.[claim_token] = c.[head_token] AND h.[state] = N'processed'
  AND h.[source] = t.[source] AND h.[aggregate_id] = t.[aggregate_id] AND h.[id] < t.[id]`),
      statement,
    );
  });
});

describe('SQL Server outbox insert: payload text through OPENJSON ... WITH (issue 26)', () => {
  it('reads payload and headers as JSON string values (unescaped by OPENJSON), never AS JSON', () => {
    const statement = sql.outboxInsertSql(T);
    assert.match(statement, /\n {2}\[payload\] NVARCHAR\(MAX\) '\$\.payload',\n/);
    assert.match(statement, /\n {2}\[headers\] NVARCHAR\(MAX\) '\$\.headers',\n/);
    assert.doesNotMatch(statement, /AS JSON/);
    assert.match(statement, /SELECT m\.\[message_id\], m\.\[destination\], m\.\[key\], m\.\[payload\], m\.\[headers\],/, 'stored as read');
  });
});

describe('SQL Server migration 006 on a live database (issue 38 L4)', () => {
  it('each ALTER TABLE ... ADD waits at most 5 s for the table, then fails with an error that says to run it again when quiet', () => {
    const tables = tablesFor('messaging.events_out', 'messaging.events_in');
    const adds = sqlServerInstancesUp(tables).filter((statement) => statement.includes('ADD [claimed_by]'));
    assert.equal(adds.length, 2);
    for (const [statement, table] of [
      [adds[0], '[messaging].[events_out]'],
      [adds[1], '[messaging].[events_in]'],
    ]) {
      assert.equal(
        statement,
        `SET LOCK_TIMEOUT 5000;
BEGIN TRY
  ALTER TABLE ${table} ADD [claimed_by] UNIQUEIDENTIFIER NULL;
END TRY
BEGIN CATCH
  IF ERROR_NUMBER() = 1222
    THROW 51006, N'QueueBox migration 006: ALTER TABLE ${table} ADD was not run: it waited 5 s for the transactions that use the table, holding up every statement behind it. Run it again when no long transaction uses the table (through TypeORM the whole migration was rolled back).', 1;
  THROW;
END CATCH`,
      );
    }
    assert.equal(ALTER_LOCK_WAIT_MS, 5000);
  });
});

describe('SQL Server migration 004 on a live database (issue 26 N3)', () => {
  const tables = tablesFor('messaging.events_out', 'messaging.events_in');
  const dependentIndexes = [...sqlServerSchemaUp(tables), ...sqlServerOperationsUp(tables), ...sqlServerClaimsUp(tables)]
    .filter((s) => /^CREATE (UNIQUE )?INDEX/.test(s) && /\[(destination|key|source|idempotency_key|aggregate_id)\]/.test(s))
    .map((s) => /^CREATE (?:UNIQUE )?INDEX \[([^\]]+)\]/.exec(s)?.[1] as string);

  for (const [direction, statements] of [
    ['up', sqlServerKeyCollationUp(tables)],
    ['down', sqlServerKeyCollationDown(tables)],
  ] as const) {
    it(`${direction}: refuses first, naming them, objects that would stop ALTER COLUMN ... COLLATE (not QueueBox's own indexes)`, () => {
      const check = statements[2];
      const firstChange = statements.findIndex((s) => s.startsWith('DROP ') || s.startsWith('ALTER TABLE'));
      assert.ok(firstChange > 2, 'before anything changes');
      assert.match(check, /^DECLARE @key_columns TABLE /);
      assert.match(check, /c\.\[object_id\] = OBJECT_ID\(N'\[messaging\]\.\[events_out\]'\) AND c\.\[name\] IN \(N'destination', N'key'\)/);
      assert.match(
        check,
        /c\.\[object_id\] = OBJECT_ID\(N'\[messaging\]\.\[events_in\]'\) AND c\.\[name\] IN \(N'source', N'idempotency_key', N'aggregate_id'\)/,
      );
      for (const source of [
        'sys.stats',
        'sys.indexes',
        'sys.foreign_key_columns',
        'sys.sql_expression_dependencies',
        'sys.fulltext_index_columns',
      ]) {
        assert.ok(check.includes(`FROM ${source} AS`), source);
      }
      assert.match(check, /WHERE s\.\[user_created\] = 1\n/, 'statistics SQL Server created itself are dropped by ALTER COLUMN');
      const own = /i\.\[name\] NOT IN \(([^)]*)\)/
        .exec(check)?.[1]
        .split(', ')
        .map((n) => n.replace(/^N'|'$/g, ''));
      assert.deepEqual(own?.sort(), [...dependentIndexes, 'events_in_source_idempotency_key_key'].sort());
      assert.match(
        check,
        /i\.\[filter_definition\] LIKE N'%\[\[\]' \+ c\.\[name\] \+ N'\]%'/,
        'an index that names the column in its filter only',
      );
      assert.match(
        check,
        new RegExp(
          `IF @blocking IS NOT NULL\\nBEGIN\\n {2}RAISERROR\\(N'QueueBox migration 004 \\(${direction}\\) changed nothing: %s depend on the key columns.*', 16, 1, @blocking\\);\\n {2}SET NOEXEC ON;\\nEND$`,
        ),
      );
      assert.equal(statements.at(-1), 'SET NOEXEC OFF', 'the plain script runs again after a refused check');
    });

    it(`${direction}: creates every index again ONLINE where the edition allows and no transaction is open, else as before`, () => {
      const creates = statements.filter((s) => s.includes('CREATE INDEX') || s.includes('CREATE UNIQUE INDEX'));
      assert.equal(creates.length, dependentIndexes.length);
      for (const statement of creates) {
        assert.ok(
          statement.startsWith(`DECLARE @online NVARCHAR(20) = CASE WHEN @@TRANCOUNT = 0 AND CAST(SERVERPROPERTY('EngineEdition') AS INT) IN (3, 5, 8)
  THEN N' WITH (ONLINE = ON)' ELSE N'' END;
EXEC (N'CREATE `),
          statement,
        );
        assert.ok(statement.endsWith("' + @online)"));
      }
    });
  }

  it('down: refuses first when keys that differ only in case would break a unique index under the default collation', () => {
    const statements = sqlServerKeyCollationDown(tables);
    const check = statements[3];
    assert.ok(statements.findIndex((s) => s.startsWith('DROP ')) > 3);
    assert.match(
      check,
      /SELECT 1 FROM \[messaging\]\.\[events_in\] GROUP BY \[source\] COLLATE DATABASE_DEFAULT, \[idempotency_key\] COLLATE DATABASE_DEFAULT HAVING COUNT\(\*\) > 1/,
    );
    assert.match(
      check,
      /SELECT 1 FROM \[messaging\]\.\[events_out\] WHERE \[state\] = N'processing' AND \[key\] IS NOT NULL GROUP BY \[key\] COLLATE DATABASE_DEFAULT HAVING COUNT\(\*\) > 1/,
    );
    assert.match(check, /GROUP BY \[source\] COLLATE DATABASE_DEFAULT, \[aggregate_id\] COLLATE DATABASE_DEFAULT HAVING COUNT\(\*\) > 1/);
    assert.match(
      check,
      /IF @collisions <> N''\nBEGIN\n {2}RAISERROR\(N'QueueBox migration 004 \(down\) changed nothing: .*', 16, 1, @collisions\);\n {2}SET NOEXEC ON;\nEND$/,
    );
    assert.ok(!sqlServerKeyCollationUp(tables).some((s) => s.includes('@collisions')), 'up has nothing to collide');
  });
});
