// The SQL Server schema: the migration classes and the plain SQL scripts, the tables and indexes
// they create, and what migration 006 does on a live database.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { migrationNotes } from '../../../lib/cli/cli-options';
import { schemaStatements } from '../../../lib/dialects/drivers';
import {
  ALTER_LOCK_WAIT_MS,
  sqlServerInstancesUp,
  sqlServerOperationsDown,
  sqlServerOperationsUp,
  sqlServerSchemaUp,
} from '../../../lib/dialects/sqlserver/schema';
import {
  createQueueBoxKeyCollationMigration,
  createQueueBoxMigration,
  createQueueBoxOperationsMigration,
} from '../../../lib/migrations/queuebox.migration';
import { renderSchemaFiles, renderSchemaSql } from '../../../lib/migrations/schema-files';
import { resolveTables } from '../../../lib/options/options.resolver';
import { TABLES, tablesFor } from '../../support/sqlserver';

describe('SQL Server schema through the migration classes and plain SQL', () => {
  it('the migration class runs the SQL Server statements on an mssql connection', async () => {
    const tables = { outbox: 'messaging.events_out', inbox: 'messaging.events_in' };
    const ran: string[] = [];
    const queryRunner = { connection: { options: { type: 'mssql' } }, query: async (statement: string) => ran.push(statement) };
    await new (createQueueBoxMigration({ tables }))().up(queryRunner as never);
    assert.deepEqual(ran, schemaStatements('mssql', resolveTables(tables), 'up'));
    assert.ok(ran.includes("IF SCHEMA_ID(N'messaging') IS NULL EXEC(N'CREATE SCHEMA [messaging]')"));
  });

  it('the operations migration class runs the SQL Server operations statements', async () => {
    const tables = { outbox: 'messaging.events_out', inbox: 'messaging.events_in' };
    const ran: string[] = [];
    const queryRunner = { connection: { options: { type: 'mssql' } }, query: async (statement: string) => ran.push(statement) };
    await new (createQueueBoxOperationsMigration({ tables }))().up(queryRunner as never);
    assert.deepEqual(ran, schemaStatements('mssql', resolveTables(tables), 'up', 'operations'));
    assert.ok(ran.includes("CREATE INDEX [events_out_sent_idx] ON [messaging].[events_out] ([sent_at]) WHERE [state] = N'sent'"));
  });

  it('the key-collation migration class runs the SQL Server statements of 004, and nothing on PostgreSQL', async () => {
    const tables = { outbox: 'messaging.events_out', inbox: 'messaging.events_in' };
    for (const type of ['mssql', 'postgres'] as const) {
      const ran: string[] = [];
      const queryRunner = { connection: { options: { type } }, query: async (statement: string) => ran.push(statement) };
      const migration = new (createQueueBoxKeyCollationMigration({ tables }))();
      assert.equal(migration.name, 'QueueBoxKeyCollation1796083200000');
      await migration.up(queryRunner as never);
      await migration.down(queryRunner as never);
      assert.deepEqual(ran, [
        ...schemaStatements(type, resolveTables(tables), 'up', 'keyCollation'),
        ...schemaStatements(type, resolveTables(tables), 'down', 'keyCollation'),
      ]);
      assert.equal(ran.length > 0, type === 'mssql');
    }
    assert.match(renderSchemaSql('postgres', { migration: 'keyCollation' }), /Nothing to do on PostgreSQL/);
  });

  it('ships sql/sqlserver/001_queuebox, 002_queuebox_operations, 003_queuebox_claims, 004_queuebox_key_collation, 005_queuebox_claim_functions, 006_queuebox_instances, 007_queuebox_claim_probes and 008_queuebox_rate_limits, 009_queuebox_renewals, 010_queuebox_pauses, 011_queuebox_attempts, 012_queuebox_unkeyed_claims, 013_queuebox_keyed_claims and 014_queuebox_claim_plans .{up,down}.sql, one GO batch per statement', () => {
    const files = renderSchemaFiles().filter((file) => file.dir === 'sql/sqlserver');
    assert.deepEqual(
      files.map((file) => file.name),
      [
        '001_queuebox.up.sql',
        '001_queuebox.down.sql',
        '002_queuebox_operations.up.sql',
        '002_queuebox_operations.down.sql',
        '003_queuebox_claims.up.sql',
        '003_queuebox_claims.down.sql',
        '004_queuebox_key_collation.up.sql',
        '004_queuebox_key_collation.down.sql',
        '005_queuebox_claim_functions.up.sql',
        '005_queuebox_claim_functions.down.sql',
        '006_queuebox_instances.up.sql',
        '006_queuebox_instances.down.sql',
        '007_queuebox_claim_probes.up.sql',
        '007_queuebox_claim_probes.down.sql',
        '008_queuebox_rate_limits.up.sql',
        '008_queuebox_rate_limits.down.sql',
        '009_queuebox_renewals.up.sql',
        '009_queuebox_renewals.down.sql',
        '010_queuebox_pauses.up.sql',
        '010_queuebox_pauses.down.sql',
        '011_queuebox_attempts.up.sql',
        '011_queuebox_attempts.down.sql',
        '012_queuebox_unkeyed_claims.up.sql',
        '012_queuebox_unkeyed_claims.down.sql',
        '013_queuebox_keyed_claims.up.sql',
        '013_queuebox_keyed_claims.down.sql',
        '014_queuebox_claim_plans.up.sql',
        '014_queuebox_claim_plans.down.sql',
      ],
    );
    const up = renderSchemaSql('mssql');
    assert.equal(up.match(/^GO$/gm)?.length, schemaStatements('mssql', TABLES, 'up').length);
    assert.ok(up.startsWith('-- QueueBox schema (mssql, up)'));
  });
});

describe('SQL Server schema: no claim functions, and nothing says so', () => {
  it("queuebox migrate's notes and the plain scripts of 005-007 speak of claim functions only as PostgreSQL's", () => {
    assert.deepEqual(migrationNotes('mssql', 'instances'), {
      applied: 'created the instances table and the claim owner columns.',
      notApplied: 'not applied: this version of QueueBox does not start until you run `queuebox migrate`',
    });
    assert.equal(migrationNotes('mssql', 'claimFunctions').applied, 'nothing to change on SQL Server (it has no claim functions).');
    assert.match(migrationNotes('postgres', 'instances').applied, /wrote the claim functions of this version/, 'PostgreSQL has them');
    for (const migration of ['claimFunctions', 'instances', 'claimProbes'] as const) {
      for (const direction of ['up', 'down'] as const) {
        const script = renderSchemaSql('mssql', { migration, direction });
        const mentions = script.split('\n').filter((line) => /claim functions/i.test(line));
        for (const line of mentions) assert.match(line, /PostgreSQL|no claim functions|no functions/, `${migration} ${direction}: ${line}`);
      }
    }
    assert.match(renderSchemaSql('mssql', { migration: 'instances' }), /^-- QueueBox instances and claim owners \(mssql, up\)/);
    assert.match(renderSchemaSql('mssql', { migration: 'claimFunctions' }), /^-- QueueBox claim functions, PostgreSQL only \(mssql, up\)/);
    assert.match(
      renderSchemaSql('postgres', { migration: 'instances' }),
      /^-- QueueBox instances, claim owners and claim functions \(postgres, up\)/,
    );
  });
});

describe('SQL Server schema: tables and indexes', () => {
  it('the schema: NVARCHAR text, DATETIME2 by SYSUTCDATETIME(), UNIQUEIDENTIFIER, JSON checks, filtered and unique in-flight indexes', () => {
    const up = sqlServerSchemaUp(tablesFor('queuebox_outbox', 'queuebox_inbox')).join('\n');
    for (const column of [
      '[id] BIGINT IDENTITY(1, 1) NOT NULL',
      '[message_id] UNIQUEIDENTIFIER NOT NULL',
      '[destination] NVARCHAR(255) NOT NULL',
      '[key] NVARCHAR(255) NULL',
      '[source] NVARCHAR(255) NOT NULL',
      '[idempotency_key] NVARCHAR(255) NOT NULL',
      '[aggregate_id] NVARCHAR(255) NULL',
      '[payload] NVARCHAR(MAX) NOT NULL',
      '[claim_token] UNIQUEIDENTIFIER NULL',
      "[state] NVARCHAR(16) NOT NULL CONSTRAINT [queuebox_outbox_state_default] DEFAULT N'pending'",
      '[available_at] DATETIME2 NOT NULL CONSTRAINT [queuebox_outbox_available_at_default] DEFAULT SYSUTCDATETIME()',
      '[lease_expires_at] DATETIME2 NULL',
      "CONSTRAINT [queuebox_outbox_payload_check] CHECK (ISJSON(N'[' + [payload] + N']') = 1)",
      'CONSTRAINT [queuebox_inbox_headers_check] CHECK (ISJSON([headers]) = 1)',
      'CONSTRAINT [queuebox_inbox_source_idempotency_key_key] UNIQUE ([source], [idempotency_key])',
      'CONSTRAINT [queuebox_outbox_message_id_key] UNIQUE ([message_id])',
    ]) {
      assert.ok(up.includes(column), column);
    }
    for (const index of [
      "CREATE INDEX [queuebox_outbox_claim_idx] ON [queuebox_outbox] ([available_at], [id]) INCLUDE ([key]) WHERE [state] = N'pending'",
      "CREATE UNIQUE INDEX [queuebox_outbox_key_in_flight_idx] ON [queuebox_outbox] ([key]) WHERE [state] = N'processing' AND [key] IS NOT NULL",
      "CREATE UNIQUE INDEX [queuebox_inbox_aggregate_in_flight_idx] ON [queuebox_inbox] ([source], [aggregate_id]) WHERE [state] = N'processing' AND [aggregate_id] IS NOT NULL",
      "CREATE INDEX [queuebox_outbox_lease_idx] ON [queuebox_outbox] ([lease_expires_at]) WHERE [state] = N'processing'",
      'ALTER TABLE [queuebox_outbox] SET (LOCK_ESCALATION = DISABLE)',
    ]) {
      assert.ok(up.includes(index), index);
    }
    // Every index but the primary keys and the unique constraints is filtered to unfinished rows.
    for (const statement of up.split('\n').filter((line) => line.startsWith('CREATE') && line.includes('INDEX'))) {
      assert.match(statement, / WHERE \[state\] (=|IN)/, statement);
    }
  });

  it('the operations migration: filtered indexes on finished and dead rows only', () => {
    const up = sqlServerOperationsUp(tablesFor('queuebox_outbox', 'queuebox_inbox'));
    assert.deepEqual(up.slice(2), [
      "CREATE INDEX [queuebox_outbox_sent_idx] ON [queuebox_outbox] ([sent_at]) WHERE [state] = N'sent'",
      "CREATE INDEX [queuebox_outbox_dead_idx] ON [queuebox_outbox] ([destination], [id]) WHERE [state] = N'dead'",
      "CREATE INDEX [queuebox_inbox_processed_idx] ON [queuebox_inbox] ([processed_at]) WHERE [state] = N'processed'",
      "CREATE INDEX [queuebox_inbox_dead_idx] ON [queuebox_inbox] ([source], [id]) WHERE [state] = N'dead'",
    ]);
    assert.deepEqual(sqlServerOperationsDown(tablesFor('messaging.events_out', 'messaging.events_in')), [
      'DROP INDEX IF EXISTS [events_in_dead_idx] ON [messaging].[events_in]',
      'DROP INDEX IF EXISTS [events_in_processed_idx] ON [messaging].[events_in]',
      'DROP INDEX IF EXISTS [events_out_dead_idx] ON [messaging].[events_out]',
      'DROP INDEX IF EXISTS [events_out_sent_idx] ON [messaging].[events_out]',
    ]);
  });
});

describe('SQL Server migration 006 on a live database', () => {
  it('each ALTER TABLE ... ADD waits at most 5 s for the table, then fails with an error that says to run it again when quiet', () => {
    const tables = tablesFor('messaging.events_out', 'messaging.events_in');
    const adds = sqlServerInstancesUp(tables).filter((statement) => statement.includes('ADD [claimed_by]'));
    assert.equal(adds.length, 2);
    for (const [statement, table] of [
      [adds[0], '[messaging].[events_out]'],
      [adds[1], '[messaging].[events_in]'],
    ]) {
      assert.equal(
        statement,
        `SET LOCK_TIMEOUT 5000;
BEGIN TRY
  ALTER TABLE ${table} ADD [claimed_by] UNIQUEIDENTIFIER NULL;
END TRY
BEGIN CATCH
  IF ERROR_NUMBER() = 1222
    THROW 51006, N'QueueBox migration 006: ALTER TABLE ${table} ADD was not run: it waited 5 s for the transactions that use the table, holding up every statement behind it. Run it again when no long transaction uses the table (through TypeORM the whole migration was rolled back).', 1;
  THROW;
END CATCH`,
      );
    }
    assert.equal(ALTER_LOCK_WAIT_MS, 5000);
  });
});
