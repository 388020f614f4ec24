// SQL Server's fenced writes (renew, complete, retry, dead-letter, release): how the dialect sends
// them, and the fence each statement states.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createDialect } from '../../../lib/core/create-dialect';
import { FINISHED_SENT, RETENTION_KINDS, scriptedDataSource, sql, T, TABLES, typed } from '../../support/sqlserver';

describe('SQL Server leases: fenced writes', () => {
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

  const FENCE = "[id] = @0 AND [state] = N'processing' AND [claim_token] = @1 AND [lease_expires_at] > SYSUTCDATETIME()";

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

  it('every statement whose affected-row count decides a fence, or ends retention, sets NOCOUNT OFF first', () => {
    const counted = [
      sql.leaseCompleteSql(T, FINISHED_SENT),
      sql.leaseReleaseSql(T),
      sql.leaseRetrySql(T),
      sql.leaseDeadLetterSql(T),
      ...RETENTION_KINDS.map((kind) => sql.retentionDeleteSql(T, kind)),
    ];
    for (const statement of counted) assert.ok(statement.startsWith('SET NOCOUNT OFF;\n'), statement.slice(0, 60));
  });
});
