// SQL Server followers: the relay's read of the rows behind a head, and their completion.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { lockTolerant, sql } from '../../support/sqlserver';

describe('SQL Server followers', () => {
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

  const O = '[messaging].[events_out]';

  it("the outbox's read: all or nothing after 500 ms of lock wait, the key index's filter, and only behind a head first of its key", () => {
    const statement = sql.outboxFollowersSql(O);
    assert.ok(statement.startsWith('SET XACT_ABORT OFF;\nSET LOCK_TIMEOUT 500;\n'), statement);
    const blocks = lockTolerant(statement);
    assert.equal(blocks.length, 1);
    assert.equal(blocks[0].orElse, 'DELETE FROM @followers;');
    assert.match(
      statement,
      /AND o\.\[key\] IS NOT NULL\n {6}AND o\.\[state\] IN \(N'pending', N'processing'\) AND o\.\[state\] = N'pending' AND o\.\[id\] > h\.\[id\]\n {4}ORDER BY o\.\[id\]/,
    );
    assert.match(
      statement,
      /WHERE NOT EXISTS \(SELECT 1 FROM \[messaging\]\.\[events_out\] AS e\n.*AND e\.\[state\] IN \(N'pending', N'processing'\) AND e\.\[id\] < h\.\[id\]\);/s,
    );
    assert.match(statement.slice(statement.indexOf('END CATCH;')), /\nFROM @followers$/);
  });

  it("the outbox heads' completion with their followers: one transaction, the heads under their fence first, each follower only behind its own", () => {
    for (const statement of [
      sql.outboxCompleteWithFollowersSql(O),
      sql.outboxDeleteWithFollowersSql(O, '[messaging].[events_out_attempts]'),
    ]) {
      assert.ok(statement.startsWith('SET XACT_ABORT ON;\n'), statement);
      const heads = statement.indexOf(
        "INNER JOIN OPENJSON(@0) WITH ([id] BIGINT '$.id', [token] UNIQUEIDENTIFIER '$.token') AS c ON t.[id] = c.[id]\nWHERE t.[state] = N'processing' AND t.[claim_token] = c.[token] AND t.[lease_expires_at] > ",
      );
      const followers = statement.indexOf(
        "INNER JOIN @heads AS h ON h.[id] = f.[head_id]\nWHERE t.[state] = N'pending' AND t.[key] = h.[key] AND t.[id] > h.[id];",
      );
      assert.ok(heads > statement.indexOf('BEGIN TRANSACTION;') && followers > heads, statement);
      assert.ok(statement.indexOf('COMMIT TRANSACTION;') > followers);
      assert.match(
        statement,
        /OPENJSON\(@1\) WITH \(\[id\] BIGINT '\$\.id', \[head_id\] BIGINT '\$\.headId'\) AS f ON t\.\[id\] = f\.\[id\]/,
      );
      assert.ok(statement.endsWith("SELECT N'head' AS [kind], [id] FROM @heads UNION ALL SELECT N'follower', [id] FROM @gone;"));
    }
    assert.match(sql.outboxCompleteWithFollowersSql(O), /\[attempts\] = t\.\[attempts\] \+ 1, \[claimed_by\] = h\.\[claimed_by\]/);
    assert.match(
      sql.outboxDeleteWithFollowersSql(O, '[messaging].[events_out_attempts]'),
      /DELETE a FROM \[messaging\]\.\[events_out_attempts\] AS a INNER JOIN \(SELECT \[id\] FROM @heads UNION ALL SELECT \[id\] FROM @gone\)/,
    );
  });
});
