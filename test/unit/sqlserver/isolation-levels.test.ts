// SQL Server isolation: QueueBox's transactions and the statements it sends outside one run READ
// COMMITTED, whatever the DataSource or the pooled connection says.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createDialect } from '../../../lib/core/create-dialect';
import * as lease from '../../../lib/dialects/sqlserver/lease.sql';
import { scriptedDataSource, sql, TABLES } from '../../support/sqlserver';

describe('SQL Server isolation: READ COMMITTED, whatever the DataSource says', () => {
  it('every claim transaction, the retention lock transaction and each retention delete run READ COMMITTED, whatever the DataSource says', async () => {
    const { dataSource, calls } = scriptedDataSource((statement) =>
      statement === sql.retentionTryLockSql()
        ? { records: [{ granted: 0 }] }
        : statement.includes('DELETE TOP')
          ? { records: [{ n: 2 }], affected: 2 }
          : { records: [], affected: 2 },
    );
    (dataSource.options as { isolationLevel?: string }).isolationLevel = 'SERIALIZABLE';
    const dialect = createDialect(dataSource, TABLES);
    await dialect.outboxClaimBatch({ limit: 1, leaseMs: 1000 });
    await dialect.inboxRelayClaimBatch({ sources: ['orders'], limit: 1, leaseMs: 1000 });
    await dialect.inboxPullClaimBatch({ source: 'orders', limit: 1, leaseMs: 1000 });
    const deleted = await dialect.retentionWithLock(() =>
      dialect.retentionDeleteBatch({ kind: 'outbox-sent', olderThanMs: 1000, limit: 10 }),
    );
    assert.equal(deleted, 2);
    const starts = calls.filter((c) => c.what === 'startTransaction');
    assert.equal(starts.length, 5, 'three claims, the retention lock, one delete');
    assert.deepEqual(
      starts.map((c) => c.isolation),
      Array(5).fill('READ COMMITTED'),
    );
    const deleteCall = calls.find((c) => c.sql?.includes('DELETE TOP'));
    assert.ok(deleteCall && starts.some((c) => c.runner === deleteCall.runner), 'the delete ran in its own pinned transaction');
  });

  it('a pull completion or relay forward at SNAPSHOT or SERIALIZABLE would fail its fence with error 3960 after a renewal: transaction() names READ COMMITTED', async () => {
    for (const level of ['SNAPSHOT', 'SERIALIZABLE', 'REPEATABLE READ', 'READ UNCOMMITTED']) {
      const { dataSource, calls } = scriptedDataSource(() => ({ records: [], affected: 1 }));
      (dataSource.options as { isolationLevel?: string }).isolationLevel = level;
      const dialect = createDialect(dataSource, TABLES);
      const fence = { table: 'inbox' as const, id: '7', token: '0f0e0d0c-0000-4000-8000-000000000000' };
      const result = await dialect.transaction(async (manager) => {
        assert.equal(await dialect.leaseComplete({ ...fence, manager }), true);
        return 'done';
      });
      assert.equal(result, 'done');
      assert.deepEqual(
        calls.map((c) => [c.runner, c.what, c.isolation ?? c.pinned]),
        [
          [1, 'startTransaction', 'READ COMMITTED'],
          [1, 'query', false],
          [1, 'commitTransaction', undefined],
          [1, 'release', undefined],
        ],
        `DataSource isolationLevel ${level}: the transaction begins READ COMMITTED and the completion joins it`,
      );
    }
  });

  it('pins READ COMMITTED in every batch sent outside a transaction, whatever level the pooled connection was left at, and leaves a caller transaction at its own level', async () => {
    const { dataSource, calls } = scriptedDataSource((statement) => {
      if (statement === sql.inboxInsertSql('[queuebox_inbox]')) return { records: [{ id: '1' }] };
      if (statement === sql.deadLetterCountSql('[queuebox_outbox]', 'outbox')) return { records: [{ n: '0' }] };
      if (statement === sql.clockNowSql()) return { records: [{ now: new Date() }] };
      return { records: [], affected: 1 };
    });
    (dataSource.options as { isolationLevel?: string }).isolationLevel = 'SNAPSHOT';
    const dialect = createDialect(dataSource, TABLES);
    const fence = { table: 'inbox' as const, id: '7', token: '0f0e0d0c-0000-4000-8000-000000000000' };
    const heads = [{ id: '3', source: 's', aggregateId: 'a' }];
    const row = { source: 's', idempotencyKey: 'e', aggregateId: null, payloadJson: '{}', headersJson: '{}' };
    // A connected runner without a transaction (the pull workers' renewal connection): TypeORM sends its statements to the pool.
    const renewal = dataSource.createQueryRunner() as unknown as { manager: never };
    const outside: [string, () => Promise<unknown>][] = [
      ['leaseRenew', () => dialect.leaseRenew({ ...fence, leaseMs: 1000 })],
      ['leaseRenew on the renewal connection', () => dialect.leaseRenew({ ...fence, leaseMs: 1000, manager: renewal.manager })],
      ['leaseComplete', () => dialect.leaseComplete(fence)],
      ['leaseCompleteBatch', () => dialect.leaseCompleteBatch({ table: 'outbox', claims: [{ id: '7', token: fence.token }] })],
      ['leaseRetry', () => dialect.leaseRetry({ ...fence, delayMs: 1, error: 'e' })],
      ['leaseDeadLetter', () => dialect.leaseDeadLetter({ ...fence, reason: 'r' })],
      ['leaseRelease', () => dialect.leaseRelease(fence)],
      ['outboxReclaim', () => dialect.outboxReclaim({ maxAttempts: 3 })],
      ['inboxReclaim', () => dialect.inboxReclaim({ sources: ['s'], maxAttempts: 3 })],
      ['inboxFollowers (the relay)', () => dialect.inboxFollowers({ heads, perHead: 5 })],
      ['inboxInsertIfAbsent (receive without a manager)', () => dialect.inboxInsertIfAbsent({ row })],
      [
        'deadLetterCount',
        () =>
          dialect.deadLetterCount({
            selection: { component: 'outbox', name: null, errorContains: null, deadAfter: null, deadBefore: null, ids: null, key: null },
          }),
      ],
      ['blockedKeySkipHead', () => dialect.blockedKeySkipHead({ component: 'outbox', key: 'k', reason: 'r' })],
      ['adminClaimList', () => dialect.adminClaimList({ component: 'inbox', limit: 5 })],
      ['clockNow', () => dialect.clockNow()],
    ];
    for (const [method, call] of outside) {
      const before = calls.length;
      await call();
      const sent = calls.slice(before).filter((c) => c.what === 'query');
      assert.equal(sent.length, 1, method);
      assert.equal(sent[0].pinned, true, `${method}: sent after SET TRANSACTION ISOLATION LEVEL READ COMMITTED`);
    }
    assert.equal(lease.PINNED_READ_COMMITTED, 'SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\n');
    // In a caller's transaction the statement joins it at the level that transaction has (the caller's choice).
    const caller = dataSource.createQueryRunner() as unknown as { manager: never; startTransaction(): Promise<void> };
    await caller.startTransaction();
    const inside: [string, () => Promise<unknown>][] = [
      ['leaseComplete', () => dialect.leaseComplete({ ...fence, manager: caller.manager })],
      ['inboxFollowers (a batch pull handler)', () => dialect.inboxFollowers({ heads, perHead: 5, manager: caller.manager })],
      [
        'inboxCompleteFollowers',
        () => dialect.inboxCompleteFollowers({ followers: [{ id: '4', headId: '3', headToken: fence.token }], manager: caller.manager }),
      ],
      ['inboxInsertIfAbsent (receive in a transaction)', () => dialect.inboxInsertIfAbsent({ row, manager: caller.manager })],
    ];
    for (const [method, call] of inside) {
      const before = calls.length;
      await call();
      const sent = calls.slice(before).filter((c) => c.what === 'query');
      assert.equal(sent.length, 1, method);
      assert.equal(sent[0].pinned, false, `${method}: not pinned in the caller's transaction`);
    }
    // Claims and retention pin theirs by beginning their own transaction at READ COMMITTED.
    const before = calls.length;
    await dialect.outboxClaimBatch({ limit: 1, leaseMs: 1000 });
    assert.deepEqual(
      calls.slice(before).map((c) => [c.what, c.isolation ?? c.pinned]),
      [
        ['startTransaction', 'READ COMMITTED'],
        ['query', false],
        ['commitTransaction', undefined],
        ['release', undefined],
      ],
    );
  });
});
