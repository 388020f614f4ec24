import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MssqlParameter } from 'typeorm';
import { finishedCountQuery, rowStatesQuery } from '../../lib/dialects/drivers';
import { resolveTables } from '../../lib/options/options.resolver';
import { tsqlSyntaxErrors } from '../support/sqlserver';

// The SQL Server side of the read-only inspection statements (CLI status, queuebox/testing), checked
// without a server like the dialect's own statements: they parse with the T-SQL grammar. The
// PostgreSQL side runs in test/e2e/cli.test.ts and test/integration/testing-helpers.test.ts.

describe('inspection statements on SQL Server', () => {
  const tables = resolveTables({ outbox: 'messaging.events_out', inbox: 'queuebox_inbox' });

  it('the finished-row count parses and reads both tables, quoted', () => {
    const { sql, params } = finishedCountQuery('mssql', tables);
    assert.deepEqual(tsqlSyntaxErrors(sql), []);
    assert.match(sql, /FROM \[messaging\]\.\[events_out\] WHERE \[state\] = N'sent' GROUP BY \[destination\]/);
    assert.match(sql, /FROM \[queuebox_inbox\] WHERE \[state\] = N'processed' GROUP BY \[source\]/);
    assert.deepEqual(params, []);
  });

  it('the row-state query parses and takes the ids as one JSON parameter', () => {
    const { sql, params } = rowStatesQuery('mssql', tables.outbox, ['1', '9007199254740993']);
    assert.deepEqual(tsqlSyntaxErrors(sql), []);
    assert.match(sql, /OPENJSON\(@0\)/);
    // Typed and sized (NVARCHAR(MAX)), like every parameter QueueBox sends to SQL Server.
    assert.deepEqual(
      params.map((p) => (p instanceof MssqlParameter ? [p.type, p.value, ...p.params] : p)),
      [['nvarchar', '["1","9007199254740993"]', 65_535]],
    );
  });
});
