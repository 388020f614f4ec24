// SQL Server parameters: numbered @0..@n-1 as each statement documents, and declared at a fixed
// size whatever the values, so one statement compiles one plan.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TYPES } from 'tedious';
import { MssqlParameter } from 'typeorm';
import { createDialect } from '../../../lib/core/create-dialect';
import { rowStatesQuery } from '../../../lib/dialects/drivers';
import * as instances from '../../../lib/dialects/sqlserver/instances.sql';
import {
  ADMIN_BUILDERS,
  ALL_STATEMENTS,
  type Builder,
  FINISHED_SENT,
  FRAGMENTS,
  instanceStatements,
  placeholders,
  scriptedDataSource,
  sql,
  T,
  TABLES,
} from '../../support/sqlserver';

describe('SQL Server parameters: numbered @0..@n-1', () => {
  it('numbers parameters @0..@n-1 with none skipped, as documented per statement', () => {
    const expected: Record<string, number> = {
      outboxClaimSql: 4,
      outboxClaimPausedSql: 5,
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
      leaseDeadLetterSql: 4,
      inboxInsertSql: 5,
      inboxFindSql: 2,
      inboxRelayClaimSql: 5,
      inboxReclaimSql: 2,
      inboxPullClaimSql: 5,
      tableExistsSql: 1,
      databaseSettingsSql: 0,
      inboxFollowersSql: 2,
      inboxCompleteFollowersSql: 1,
      outboxFollowersSql: 2,
      outboxCompleteWithFollowersSql: 2,
      keyCollationSql: 1,
      clockNowSql: 0,
      pauseListSql: 0,
      pauseInsertSql: 4,
      pauseDeleteSql: 2,
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
    assert.doesNotMatch(ALL_STATEMENTS.map((s) => s.statement).join('\n'), /\$\d/, 'no PostgreSQL placeholders');
  });

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

  it("numbers the admin and retention statements' parameters @0..@n-1 as documented", () => {
    const expected: [string, string, number][] = [
      ['backlog', sql.adminBacklogSql(O, I), 0],
      ['list', sql.deadLetterListSql(O, 'outbox', false), 9],
      ['list newest first', sql.deadLetterListSql(I, 'inbox', true, true), 9],
      ['count', sql.deadLetterCountSql(I, 'inbox'), 7],
      ['replay', sql.deadLetterReplaySql(O, 'outbox'), 9],
      ['discard', sql.deadLetterDiscardSql(I, 'inbox'), 9],
      ['groups', sql.deadLetterGroupsSql(I, 'inbox'), 1],
      ['classes', sql.deadLetterClassesSql(O, 'outbox'), 0],
      ['outbox reclaim recorded', sql.outboxReclaimRecordedSql(O, '[queuebox_outbox_attempts]'), 2],
      ['inbox reclaim recorded', sql.inboxReclaimRecordedSql(I, '[queuebox_inbox_attempts]'), 3],
      ['attempts', sql.attemptListSql('[queuebox_inbox_attempts]'), 1],
      ['retry recorded', sql.leaseRetryRecordedSql(O, '[queuebox_outbox_attempts]'), 6],
      ['dead letter recorded', sql.leaseDeadLetterRecordedSql(O, '[queuebox_outbox_attempts]'), 7],
      ['delete on send', sql.leaseDeleteSql(O, '[queuebox_outbox_attempts]'), 2],
      ['delete on send, batch', sql.leaseDeleteBatchSql(O, '[queuebox_outbox_attempts]'), 1],
      ['delete on send, with followers', sql.outboxDeleteWithFollowersSql(O, '[queuebox_outbox_attempts]'), 2],
      ['throughput', sql.adminThroughputSql(O, I), 1],
      ['claims', sql.adminClaimListSql(O, 'outbox', { instances: '[queuebox_instances]', outbox: O, inbox: I }), 1],
      ['blocked', sql.blockedKeyListSql(O, 'outbox', { instances: '[queuebox_instances]', outbox: O, inbox: I }), 1],
      ['skip outbox', sql.blockedKeySkipHeadSql(O, 'outbox'), 4],
      ['skip inbox', sql.blockedKeySkipHeadSql(I, 'inbox'), 5],
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
});

describe('SQL Server parameters: declared at a fixed size', () => {
  // What tedious declares for a parameter (sp_executesql's parameter list), from the type and
  // length TypeORM hands to mssql. An unsized NVARCHAR is declared at its value's length, so each
  // distinct length would compile a plan of its own.
  const TEDIOUS_TYPE: Record<string, keyof typeof TYPES> = {
    nvarchar: 'NVarChar',
    bigint: 'BigInt',
    int: 'Int',
    uniqueidentifier: 'UniqueIdentifier',
  };
  const declared = (p: unknown, value?: unknown) => {
    assert.ok(p instanceof MssqlParameter, `an untyped parameter was sent: ${JSON.stringify(p)}`);
    const type = TEDIOUS_TYPE[p.type];
    assert.ok(type, `unexpected parameter type ${p.type}`);
    return TYPES[type].declaration({ value: value === undefined ? p.value : value, length: p.params[0] } as never);
  };

  it('every statement the dialect sends declares each parameter by its column, whatever the values', async () => {
    const { dataSource, calls } = scriptedDataSource((statement) => {
      if (statement === sql.retentionTryLockSql()) return { records: [{ granted: 0 }] };
      if (statement === sql.deadLetterCountSql('[queuebox_outbox]', 'outbox')) return { records: [{ n: '0' }] };
      if (statement === sql.inboxInsertSql('[queuebox_inbox]')) return { records: [{ id: '1' }] };
      if (statement === sql.outboxInsertSql('[queuebox_outbox]'))
        return { records: [{ id: '1', message_id: 'AAAAAAAA-0000-4000-8000-000000000000' }] };
      if (statement === sql.outboxInsertIfAbsentSql('[queuebox_outbox]'))
        return { records: [{ id: '1', message_id: 'AAAAAAAA-0000-4000-8000-000000000000' }] };
      if (statement === instances.instanceRegisterSql('[queuebox_instances]')) return { records: [{ registered: 1 }] };
      if (statement === instances.instanceHeartbeatSql('[queuebox_instances]')) return { records: [{ beats: '4', registered: 1 }] };
      return { records: [], affected: 1 };
    });
    const dialect = createDialect(dataSource, TABLES);
    const caller = dataSource.createQueryRunner() as unknown as { manager: never };
    const fence = { table: 'outbox' as const, id: '7', token: '0f0e0d0c-0000-4000-8000-000000000000' };
    const selection = {
      component: 'outbox' as const,
      name: 'billing',
      errorContains: 'boom',
      deadAfter: new Date(0),
      deadBefore: new Date(1),
      ids: ['1', '2'],
      key: 'customer-1',
      fingerprint: 'PublishError/503: HTTP #',
    };
    const N255 = 'nvarchar(255)';
    const MAX = 'nvarchar(max)';
    const expected: [string, () => Promise<unknown>, string[]][] = [
      [
        'outboxInsert',
        () =>
          dialect.outboxInsert({
            manager: caller.manager,
            rows: [
              {
                messageId: 'aaaaaaaa-0000-4000-8000-000000000000',
                destination: 'd',
                key: 'k',
                payloadJson: '1',
                headersJson: '{}',
                availableAt: null,
              },
            ],
          }),
        [MAX],
      ],
      [
        'outboxInsert (ifAbsent; its lookup of skipped ids is declared as the insert is, see the test of onDuplicate above)',
        () =>
          dialect.outboxInsert({
            manager: caller.manager,
            rows: [
              {
                messageId: 'aaaaaaaa-0000-4000-8000-000000000000',
                destination: 'd',
                key: 'k',
                payloadJson: '1',
                headersJson: '{}',
                availableAt: null,
              },
            ],
            ifAbsent: true,
          }),
        [MAX],
      ],
      ['outboxClaimBatch', () => dialect.outboxClaimBatch({ limit: 5, leaseMs: 1000 }), [N255, 'int', 'bigint', 'uniqueidentifier']],
      ['outboxReclaim', () => dialect.outboxReclaim({ maxAttempts: 3 }), ['int']],
      [
        'inboxInsertIfAbsent',
        () =>
          dialect.inboxInsertIfAbsent({
            row: { source: 's', idempotencyKey: 'e', aggregateId: null, payloadJson: '{}', headersJson: '{}' },
          }),
        [N255, N255, N255, MAX, MAX],
      ],
      [
        'inboxRelayClaimBatch',
        () => dialect.inboxRelayClaimBatch({ sources: ['a'], limit: 5, leaseMs: 1000 }),
        [N255, 'int', 'bigint', MAX, 'uniqueidentifier'],
      ],
      ['inboxReclaim', () => dialect.inboxReclaim({ sources: ['a'], maxAttempts: 3 }), ['int', MAX]],
      [
        'inboxPullClaimBatch',
        () => dialect.inboxPullClaimBatch({ source: 'a', limit: 5, leaseMs: 1000 }),
        [N255, 'int', 'bigint', N255, 'uniqueidentifier'],
      ],
      ['inboxFollowers', () => dialect.inboxFollowers({ heads: [{ id: '3', source: 's', aggregateId: 'a' }], perHead: 5 }), [MAX, 'int']],
      [
        'inboxCompleteFollowers',
        () => dialect.inboxCompleteFollowers({ followers: [{ id: '4', headId: '3', headToken: fence.token }], manager: caller.manager }),
        [MAX],
      ],
      ['outboxFollowers', () => dialect.outboxFollowers({ heads: [{ id: '3', key: 'k' }], perHead: 5 }), [MAX, 'int']],
      [
        'outboxCompleteWithFollowers',
        () => dialect.outboxCompleteWithFollowers({ heads: [fence], followers: [{ id: '4', headId: fence.id }] }),
        [MAX, MAX],
      ],
      ['leaseRenew', () => dialect.leaseRenew({ ...fence, leaseMs: 1000 }), ['bigint', 'uniqueidentifier', 'bigint']],
      ['leaseComplete', () => dialect.leaseComplete(fence), ['bigint', 'uniqueidentifier']],
      ['leaseCompleteBatch', () => dialect.leaseCompleteBatch({ table: 'outbox', claims: [{ id: '7', token: fence.token }] }), [MAX]],
      ['leaseRelease', () => dialect.leaseRelease(fence), ['bigint', 'uniqueidentifier']],
      ['leaseRetry', () => dialect.leaseRetry({ ...fence, delayMs: 5, error: 'x' }), ['bigint', 'uniqueidentifier', 'bigint', MAX]],
      ['leaseDeadLetter', () => dialect.leaseDeadLetter({ ...fence, reason: 'x' }), ['bigint', 'uniqueidentifier', MAX, MAX]],
      [
        'leaseRetry recorded',
        () => dialect.leaseRetry({ ...fence, delayMs: 5, error: 'x', attempt: { error: 'x', errorClass: 'Error', keep: 3 } }),
        ['bigint', 'uniqueidentifier', 'bigint', MAX, MAX, 'int'],
      ],
      [
        'leaseDeadLetter recorded',
        () =>
          dialect.leaseDeadLetter({
            ...fence,
            reason: 'x',
            fingerprint: 'Error: x',
            attempt: { error: 'x', errorClass: 'Error', keep: 3 },
          }),
        ['bigint', 'uniqueidentifier', MAX, MAX, MAX, MAX, 'int'],
      ],
      ['deadLetterGroups', () => dialect.deadLetterGroups({ component: 'inbox', limit: 5 }), ['int']],
      ['attemptList', () => dialect.attemptList({ component: 'inbox', id: '7' }), ['bigint']],
      [
        'deadLetterList',
        () => dialect.deadLetterList({ selection, afterId: null, limit: 5, includePayload: false }),
        [N255, MAX, 'nvarchar(30)', 'nvarchar(30)', MAX, N255, 'nvarchar(512)', 'bigint', 'int'],
      ],
      [
        'deadLetterCount',
        () => dialect.deadLetterCount({ selection }),
        [N255, MAX, 'nvarchar(30)', 'nvarchar(30)', MAX, N255, 'nvarchar(512)'],
      ],
      [
        'deadLetterReplay',
        () => dialect.deadLetterReplay({ selection, afterId: '3', limit: 5 }),
        [N255, MAX, 'nvarchar(30)', 'nvarchar(30)', MAX, N255, 'nvarchar(512)', 'bigint', 'int'],
      ],
      ['blockedKeyList', () => dialect.blockedKeyList({ component: 'inbox', limit: 5 }), ['int']],
      ['adminClaimList', () => dialect.adminClaimList({ component: 'inbox', limit: 5 }), ['int']],
      [
        'blockedKeySkipHead outbox',
        () => dialect.blockedKeySkipHead({ component: 'outbox', key: 'k', reason: 'r' }),
        [N255, 'bigint', MAX, MAX],
      ],
      [
        'blockedKeySkipHead inbox',
        () => dialect.blockedKeySkipHead({ component: 'inbox', source: 's', aggregateId: 'a', headId: '4', reason: 'r' }),
        [N255, N255, 'bigint', MAX, MAX],
      ],
      ['retentionWithLock', () => dialect.retentionWithLock(async () => 0), [N255]],
      ['retentionDeleteBatch', () => dialect.retentionDeleteBatch({ kind: 'outbox-sent', olderThanMs: 1000, limit: 5 }), ['bigint', 'int']],
      [
        'instanceRegister',
        () =>
          dialect.instanceRegister({ id: fence.token, host: 'h', pid: 7, dataSource: 'default', version: '1.0.0', deadAfterMs: 15_000 }),
        ['uniqueidentifier', N255, 'int', N255, N255, 'int'],
      ],
      [
        'instanceHeartbeat',
        () => dialect.instanceHeartbeat({ id: fence.token, beats: { from: 3, to: 5 } }),
        ['uniqueidentifier', 'bigint', 'bigint'],
      ],
      ['instanceEndDead', () => dialect.instanceEndDead({ self: fence.token, unregisteredAfterMs: 15_000 }), ['int', 'uniqueidentifier']],
      ['instanceDeregister', () => dialect.instanceDeregister({ id: fence.token }), ['uniqueidentifier']],
      ['instanceList', () => dialect.instanceList(), []],
    ];
    for (const [method, call, types] of expected) {
      const before = calls.length;
      await call();
      const sent = calls.slice(before).filter((c) => c.what === 'query');
      assert.equal(sent.length, 1, `${method}: one statement`);
      const params = sent[0].params ?? [];
      assert.deepEqual(
        params.map((p) => declared(p)),
        types,
        method,
      );
      for (const p of params) {
        if ((p as MssqlParameter).type !== 'nvarchar') continue;
        for (const other of [null, '', 'x'.repeat(17), 'y'.repeat(5000)]) {
          assert.equal(declared(p, other), declared(p), `${method}: the declaration does not depend on the value`);
        }
      }
    }
    const rowStates = rowStatesQuery('mssql', TABLES.outbox, ['1', '2']);
    assert.deepEqual(
      rowStates.params.map((p) => declared(p)),
      [MAX],
      'queuebox/testing and the CLI send typed parameters too',
    );
  });
});
