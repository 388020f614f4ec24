// SQL Server housekeeping (the dead-instance sweep, the reclaims, retention) and the instance
// states it acts on.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import * as instances from '../../../lib/dialects/sqlserver/instances.sql';
import { SqlServerDialect } from '../../../lib/dialects/sqlserver/sqlserver.dialect';
import { RETENTION_KINDS, scriptedDataSource, sql, TABLES } from '../../support/sqlserver';

describe('SQL Server housekeeping never waits for a row, and loses its deadlocks', () => {
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
      N': the worker crashed, was stopped or outlived its lease'),
    [fingerprint] = CASE WHEN [attempts] >= @0 THEN N'LeaseExpired: lease expired on attempt # of #: the worker crashed, was stopped or outlived its lease' ELSE [fingerprint] END
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

describe('SQL Server instance states', () => {
  const O = '[messaging].[events_out]';
  const I = '[messaging].[events_in]';

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
});

describe('SQL Server retention', () => {
  it('a lock held by another replica (-1) skips the run quietly; any other failure (-2, -3, -999) is logged', async () => {
    for (const [granted, warned] of [
      [-1, false],
      [-2, true],
      [-3, true],
      [-999, true],
    ] as const) {
      const { dataSource } = scriptedDataSource((statement) => (statement === sql.retentionTryLockSql() ? { records: [{ granted }] } : {}));
      const warnings: string[] = [];
      const dialect = new SqlServerDialect(dataSource, TABLES, { warn: (message) => warnings.push(message) });
      let ran = false;
      assert.equal(
        await dialect.retentionWithLock(async () => {
          ran = true;
          return 1;
        }),
        null,
      );
      assert.equal(ran, false);
      assert.equal(warnings.length, warned ? 1 : 0, String(granted));
      if (warned)
        assert.match(warnings[0], new RegExp(`sp_getapplock returned ${granted} \\(.*\\), not -1.*This retention run is skipped`));
    }
  });

  const O = '[messaging].[events_out]';

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
});
