// Every T-SQL statement QueueBox sends, checked without a server: each parses with the T-SQL
// grammar, and what holds for all of them. No SQL Server runs here; docs/sqlserver.md says what was
// and was not run against one. The statements by noun are pinned in the other files of this folder.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import * as postgresClaims from '../../../lib/dialects/postgres/claims.sql';
import * as postgresInbox from '../../../lib/dialects/postgres/inbox.sql';
import { mssqlTable } from '../../../lib/dialects/sqlserver/quoting';
import { sqlServerSchemaDown, sqlServerSchemaUp } from '../../../lib/dialects/sqlserver/schema';
import { ALL_STATEMENTS, sql, T, tablesFor, tsqlSyntaxErrors } from '../../support/sqlserver';

const postgres = { ...postgresClaims, ...postgresInbox };

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

  for (const { name, statement } of ALL_STATEMENTS) {
    it(name, () => {
      assert.deepEqual(tsqlSyntaxErrors(statement), [], statement);
    });
  }
});

describe('SQL Server statements: what holds for every one', () => {
  it('uses the database clock in UTC, SYSUTCDATETIME(), and never another clock', () => {
    for (const { name, statement } of ALL_STATEMENTS) {
      assert.doesNotMatch(statement, /GETDATE|GETUTCDATE|CURRENT_TIMESTAMP|SYSDATETIME\(|SYSDATETIMEOFFSET|now\(|clock_timestamp/i, name);
    }
    for (const build of [sql.outboxClaimSql, sql.inboxRelayClaimSql, sql.inboxPullClaimSql, sql.leaseRenewSql, sql.leaseRetrySql]) {
      assert.match(build(T), /SYSUTCDATETIME\(\)/);
    }
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
    for (const { name, statement } of ALL_STATEMENTS) {
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
});
