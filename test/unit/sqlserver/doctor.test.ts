// `queuebox doctor` on SQL Server, without a server: every statement it reads with and every
// repair it prints parse as T-SQL, the indexes it expects are the SQL Server migrations' own, and
// the dialect turns the DMVs' rows into the facts the warnings read. Never run against a server.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createDialect } from '../../../lib/core/create-dialect';
import { SCHEMA_MIGRATIONS } from '../../../lib/dialects/schema-migrations';
import * as doctor from '../../../lib/dialects/sqlserver/doctor.sql';
import { mssqlTable } from '../../../lib/dialects/sqlserver/quoting';
import { scriptedDataSource, TABLE_SETS, TABLES, tsqlSyntaxErrors } from '../../support/sqlserver';

describe('SQL Server: the doctor statements', () => {
  for (const tables of TABLE_SETS) {
    const names = (['outbox', 'inbox', 'instances'] as const).map((kind) => mssqlTable(tables[kind]));
    it(`every read and every repair but ALTER INDEX parses as T-SQL (${tables.outbox.qualified})`, () => {
      const statements = [
        doctor.doctorTablesSql(names),
        doctor.doctorIndexesSql(names),
        doctor.doctorHorizonSql(),
        doctor.doctorLockWaitsSql(names),
        // Not ALTER INDEX ... REBUILD: the grammar (antlr4ts-sql) has no ALTER INDEX at all; its
        // text is pinned in the last case below instead.
        doctor.doctorRepairs.dropIndex('odd]name', names[0]),
        doctor.doctorRepairs.endSession('57'),
      ];
      for (const statement of statements) assert.deepEqual(tsqlSyntaxErrors(statement), [], statement);
    });
  }

  it('reads catalog views and DMVs only, each list bounded, the tables by OBJECT_ID', () => {
    const names = [mssqlTable(TABLES.outbox)];
    assert.match(doctor.doctorTablesSql(names), /sys\.dm_db_partition_stats/);
    assert.doesNotMatch(doctor.doctorTablesSql(names), /dm_db_index_physical_stats/);
    assert.match(doctor.doctorIndexesSql(names), /i\.is_disabled = 1/);
    assert.match(doctor.doctorHorizonSql(), /^SELECT TOP \(3\) .*sys\.dm_tran_active_transactions/s);
    assert.match(doctor.doctorLockWaitsSql(names), /^SELECT TOP \(10\) .*request_status = N'WAIT'/s);
    assert.match(doctor.doctorTablesSql(names), /\(N'\[queuebox_outbox\]', 0\)/);
  });

  it('expects the indexes the SQL Server migrations create, each with its CREATE statement; none after 001 only of the later ones', () => {
    const all = doctor.expectedIndexes(TABLES, SCHEMA_MIGRATIONS);
    const names = all.map((index) => index.name).sort();
    assert.ok(names.includes('queuebox_outbox_claim_idx') && names.includes('queuebox_inbox_dead_idx'), names.join(', '));
    assert.ok(names.includes('queuebox_outbox_unkeyed_claim_idx'), names.join(', '));
    for (const index of all) assert.match(index.create, new RegExp(`^CREATE (UNIQUE )?INDEX \\[${index.name}\\] ON `));
    const first = doctor.expectedIndexes(TABLES, ['schema']).map((index) => index.name);
    assert.ok(!first.includes('queuebox_outbox_dead_idx') && first.includes('queuebox_outbox_key_in_flight_idx'), first.join(', '));
  });

  it('the dialect turns the rows into facts: no dead-row count or autovacuum (null), KILL and ALTER INDEX repairs', async () => {
    const { dataSource, calls } = scriptedDataSource((statement) => {
      if (statement.includes('used_page_count) * 8192 FROM sys.dm_db_partition_stats ps\n        WHERE ps.object_id = OBJECT_ID'))
        return {
          records: ['[queuebox_outbox]', '[queuebox_inbox]', '[queuebox_instances]'].map((table) => ({
            table,
            present: true,
            live_rows: '12',
            bytes: '16384',
          })),
        };
      if (statement.includes('sys.indexes'))
        return { records: [{ table: '[queuebox_outbox]', name: 'queuebox_outbox_claim_idx', valid: false, bytes: '8192' }] };
      if (statement.includes('dm_tran_active_transactions'))
        return { records: [{ holder: '61', detail: 'report (sleeping)', seconds: 900 }] };
      if (statement.includes('dm_tran_locks')) return { records: [] };
      return new Error(`unexpected: ${statement}`);
    });
    const facts = await createDialect(dataSource, TABLES).doctorFacts({ applied: SCHEMA_MIGRATIONS });
    assert.deepEqual(
      facts.tables.map((t) => [t.table, t.kind, t.liveRows, t.deadRows, t.autovacuumEnabled, t.vacuum]),
      [
        ['queuebox_outbox', 'outbox', 12, null, null, null],
        ['queuebox_inbox', 'inbox', 12, null, null, null],
        ['queuebox_instances', 'instances', 12, null, null, null],
      ],
    );
    assert.deepEqual(facts.indexes, [
      {
        table: 'queuebox_outbox',
        name: 'queuebox_outbox_claim_idx',
        valid: false,
        bytes: 8192,
        rebuild: 'ALTER INDEX [queuebox_outbox_claim_idx] ON [queuebox_outbox] REBUILD WITH (ONLINE = ON)',
        drop: 'DROP INDEX [queuebox_outbox_claim_idx] ON [queuebox_outbox]',
      },
    ]);
    assert.deepEqual(
      facts.horizon.map((h) => [h.kind, h.holder, h.seconds, h.end]),
      [['session', '61', 900, 'KILL 61']],
    );
    assert.equal(facts.autovacuumServer, null);
    assert.equal(calls.filter((call) => call.what === 'query').length, 4);
  });
});
