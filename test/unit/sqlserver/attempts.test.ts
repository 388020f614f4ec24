// SQL Server statements of the attempt history and the dead-letter groups (the attempts migration): written
// beside PostgreSQL's, checked here as text (no SQL Server runs in this suite).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { sql } from '../../support/sqlserver';

const O = '[messaging].[events_out]';
const I = '[messaging].[events_in]';
const H = '[messaging].[events_out_attempts]';
const FENCE = "[id] = @0 AND [state] = N'processing' AND [claim_token] = @1 AND [lease_expires_at] > SYSUTCDATETIME()";

describe('SQL Server attempt history and dead-letter groups: statement shapes', () => {
  it("outbox.sentRows 'delete': the fenced delete and the row's attempt history in one transaction of one batch", () => {
    const single = sql.leaseDeleteSql(O, H);
    assert.ok(single.includes(`DELETE FROM ${O}\nOUTPUT deleted.[id] INTO @gone\nWHERE ${FENCE};`), single);
    const batch = sql.leaseDeleteBatchSql(O, H);
    assert.match(batch, /WITH \(INDEX \(\[events_out_pkey\]\), FORCESEEK\)/, 'one seek of the primary key per claim');
    assert.ok(
      batch.includes("WHERE t.[state] = N'processing' AND t.[claim_token] = c.[token] AND t.[lease_expires_at] > SYSUTCDATETIME();"),
      batch,
    );
    for (const statement of [single, batch]) {
      assert.ok(statement.startsWith('SET XACT_ABORT ON;\nDECLARE @gone TABLE ('), statement.slice(0, 80));
      assert.ok(statement.includes(`BEGIN TRANSACTION;\n`), 'one transaction');
      assert.ok(
        statement.includes(`DELETE h FROM ${H} AS h INNER JOIN @gone AS g ON h.[row_id] = g.[id];\nCOMMIT TRANSACTION;`),
        'the history of the deleted rows only',
      );
    }
    assert.ok(single.endsWith('SELECT COUNT_BIG(*) AS [n] FROM @gone;'), 'n = 1 when the fence held');
    assert.ok(batch.endsWith('SELECT [id] FROM @gone;'), 'the ids it deleted');
  });

  it('a retry or dead letter that records its attempt: the fenced update, the history row and the trim in one transaction of one batch', () => {
    for (const [statement, outcome, error, errorClass, keep] of [
      [sql.leaseRetryRecordedSql(O, H), 'retry', '@3', '@4', '@5'],
      [sql.leaseDeadLetterRecordedSql(O, H), 'dead', '@4', '@5', '@6'],
    ] as const) {
      assert.ok(statement.startsWith('SET XACT_ABORT ON;\nDECLARE @failed TABLE ('), statement.slice(0, 80));
      assert.match(statement, /\nBEGIN TRANSACTION;\nUPDATE \[messaging\]\.\[events_out\]/);
      assert.ok(
        statement.includes(
          `OUTPUT inserted.[id], inserted.[attempts], inserted.[claimed_at], inserted.[claimed_by] INTO @failed\nWHERE ${FENCE};`,
        ),
      );
      assert.ok(
        statement.includes(
          `SELECT f.[id], f.[attempts], SYSUTCDATETIME(), DATEDIFF_BIG(MILLISECOND, f.[claimed_at], SYSUTCDATETIME()), f.[claimed_by], ${errorClass}, ${error}, N'${outcome}'\nFROM @failed AS f;`,
        ),
        'the attempt of the row the fence changed, and only that one',
      );
      assert.ok(
        statement.includes(`SELECT TOP (${keep}) k.[id] FROM ${H} AS k WHERE k.[row_id] = f.[id] ORDER BY k.[id] DESC`),
        'trimmed to the newest keep',
      );
      assert.ok(statement.endsWith('COMMIT TRANSACTION;\nSELECT COUNT_BIG(*) AS [n] FROM @failed;'), 'n = 1 when the fence held');
    }
    assert.match(sql.leaseDeadLetterRecordedSql(O, H), /\[last_error\] = @2, \[fingerprint\] = @3\n/);
    assert.match(
      sql.leaseDeadLetterSql(O),
      /\[last_error\] = @2, \[fingerprint\] = @3\n/,
      'the plain dead letter writes the fingerprint too',
    );
    assert.doesNotMatch(sql.leaseRetrySql(O), /attempts\]|fingerprint/, 'the plain retry is as before');
  });

  it('the reclaims record each expired attempt as LeaseExpired and set the reclaim fingerprint on the rows they kill', () => {
    for (const statement of [sql.outboxReclaimRecordedSql(O, H), sql.inboxReclaimRecordedSql(I, H)]) {
      assert.ok(statement.startsWith('SET DEADLOCK_PRIORITY LOW;\nSET LOCK_TIMEOUT 2000;\nSET XACT_ABORT ON;\n'), statement.slice(0, 90));
      assert.match(
        statement,
        /INTO @reclaimed\nFROM \[messaging\]\.\[events_(out|in)\] AS t WITH \(ROWLOCK, READPAST, INDEX \(\[events_(out|in)_lease_idx\]\)\)/,
      );
      assert.match(
        statement,
        /N'LeaseExpired', COALESCE\(r\.\[last_error\], N''\),\n {7}CASE WHEN r\.\[state\] = N'dead' THEN N'dead' ELSE N'retry' END/,
      );
      assert.match(statement, /\[fingerprint\] = CASE WHEN \[attempts\] >= @0 THEN N'LeaseExpired: lease expired on attempt # of #: /);
      assert.ok(statement.endsWith('COMMIT TRANSACTION;\nSELECT [state], [name] FROM @reclaimed;'));
    }
  });

  it('groups, classes and attempts read dead rows or one row only; a group selection is re-checked in the write', () => {
    assert.match(
      sql.deadLetterGroupsSql(O, 'outbox'),
      /^SELECT TOP \(@0\) \[destination\] AS \[name\], \[fingerprint\], COUNT_BIG\(\*\) AS \[n\],/,
    );
    assert.match(
      sql.deadLetterGroupsSql(I, 'inbox'),
      /WHERE \[state\] = N'dead'\nGROUP BY \[source\], \[fingerprint\]\nORDER BY COUNT_BIG\(\*\) DESC/,
    );
    assert.match(
      sql.deadLetterClassesSql(O, 'outbox'),
      /COALESCE\(LEFT\(\[fingerprint\], NULLIF\(CHARINDEX\(N': ', \[fingerprint\]\), 0\) - 1\), \[fingerprint\], N'unknown'\)/,
    );
    assert.match(sql.attemptListSql(H), /FROM \[messaging\]\.\[events_out_attempts\] WHERE \[row_id\] = @0\nORDER BY \[id\] DESC$/);
    assert.match(sql.deadLetterCountSql(O, 'outbox'), /AND \(@6 IS NULL OR \[fingerprint\] = @6\) OPTION \(RECOMPILE\)$/);
  });

  it('a discard or a retention batch deletes the rows’ history with them', () => {
    const discard = sql.deadLetterDiscardSql(O, 'outbox', H);
    assert.ok(
      discard.startsWith(
        'SET XACT_ABORT ON;\nDECLARE @gone TABLE ([id] BIGINT NOT NULL PRIMARY KEY);\nBEGIN TRANSACTION;\nWITH [batch] AS (',
      ),
    );
    assert.match(
      discard,
      /OUTPUT deleted\.\[id\] INTO @gone\nWHERE \[state\] = N'dead' AND \(@6 IS NULL OR \[fingerprint\] = @6\)\nOPTION \(RECOMPILE\);\n/,
    );
    assert.ok(
      discard.endsWith(
        `DELETE h FROM ${H} AS h INNER JOIN @gone AS g ON h.[row_id] = g.[id];\nCOMMIT TRANSACTION;\nSELECT [id] FROM @gone;`,
      ),
    );
    const retention = sql.retentionDeleteSql(O, 'outbox-sent', H);
    assert.match(
      retention,
      /^DECLARE @gone TABLE .*\nDELETE TOP \(@1\) FROM \[messaging\]\.\[events_out\] WITH \(ROWLOCK, READPAST\)\nOUTPUT deleted\.\[id\] INTO @gone\n/s,
    );
    assert.ok(
      retention.endsWith(`DELETE h FROM ${H} AS h INNER JOIN @gone AS g ON h.[row_id] = g.[id];\nSELECT COUNT_BIG(*) AS [n] FROM @gone;`),
    );
  });
});
