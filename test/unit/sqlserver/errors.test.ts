// How the SQL Server dialect reports a failed request: every error of it, in the one it throws.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { QueryFailedError } from 'typeorm';
import { createDialect } from '../../../lib/core/create-dialect';
import { QueueBoxError } from '../../../lib/errors/queuebox.errors';
import { scriptedDataSource, TABLES } from '../../support/sqlserver';

describe('SQL Server errors: every error of a failed request', () => {
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

  it('a failed request names the errors before its last one in the error QueueBox throws', async () => {
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

  it('a claim-lock error hidden behind error 266 is still recognised', async () => {
    const claim = scriptedDataSource(() => mismatch({ number: 51001, message: 'QueueBox: sp_getapplock did not grant the claim lock.' }));
    await assert.rejects(
      createDialect(claim.dataSource, TABLES).outboxClaimBatch({ limit: 1, leaseMs: 1000 }),
      (error: unknown) => error instanceof QueueBoxError && error.code === 'QUEUEBOX_CLAIM_LOCK' && /was not granted/.test(error.message),
    );
  });
});
