// SQL Server compares keys exactly: start-up refuses key columns under another collation, the
// dialect refuses keys SQL Server's = would not tell apart, and migration 004 moves the columns.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MssqlParameter } from 'typeorm';
import { createDialect } from '../../../lib/core/create-dialect';
import {
  KEY_COLLATION,
  sqlServerClaimsUp,
  sqlServerKeyCollationDown,
  sqlServerKeyCollationUp,
  sqlServerOperationsUp,
  sqlServerSchemaUp,
} from '../../../lib/dialects/sqlserver/schema';
import { QueueBoxConfigError, QueueBoxValidationError } from '../../../lib/errors/queuebox.errors';
import { ALL_STATEMENTS, scriptedDataSource, sql, T, TABLES, tablesFor } from '../../support/sqlserver';

describe('SQL Server keys compared exactly', () => {
  it('schemaCheck refuses key columns that are not Latin1_General_100_BIN2, naming them and migration 004', async () => {
    const collations: Record<string, { column: string; collation: string }[]> = {
      '[queuebox_outbox]': [
        { column: 'destination', collation: 'Latin1_General_100_BIN2' },
        { column: 'key', collation: 'Latin1_General_100_BIN2' },
      ],
      '[queuebox_inbox]': [
        { column: 'source', collation: 'Latin1_General_100_BIN2' },
        { column: 'idempotency_key', collation: 'SQL_Latin1_General_CP1_CI_AS' },
        { column: 'aggregate_id', collation: 'SQL_Latin1_General_CP1_CI_AS' },
      ],
    };
    const respond = (statement: string, params: unknown[]) => {
      if (statement === sql.tableExistsSql()) return { records: [{ found: 1 }] };
      if (statement === sql.keyCollationSql()) return { records: collations[(params[0] as MssqlParameter).value as string] };
      return { records: [{ compatibility_level: 160 }] };
    };
    await assert.rejects(createDialect(scriptedDataSource(respond).dataSource, TABLES).schemaCheck(), (error: unknown) => {
      assert.ok(error instanceof QueueBoxConfigError);
      assert.equal(error.option, 'migrations');
      assert.match(
        error.message,
        /"queuebox_inbox" on SQL Server compares "idempotency_key", "aggregate_id" under the database's collation/,
      );
      assert.match(error.message, /Run migration QueueBoxKeyCollation1796083200000/);
      return true;
    });
    collations['[queuebox_inbox]'] = collations['[queuebox_inbox]'].map((c) => ({ ...c, collation: 'Latin1_General_100_BIN2' }));
    await createDialect(scriptedDataSource(respond).dataSource, TABLES).schemaCheck();
  });

  it("refuses keys, destinations and sources that end with a space (SQL Server's = ignores them), before any statement runs", async () => {
    const { dataSource, calls } = scriptedDataSource(() => ({ records: [{ id: '1' }] }));
    const dialect = createDialect(dataSource, TABLES);
    const row = { source: 'orders', idempotencyKey: 'e1', aggregateId: null, payloadJson: '{}', headersJson: '{}' };
    for (const [field, bad] of [
      ['idempotencyKey', { idempotencyKey: 'e1 ' }],
      ['source', { source: 'orders ' }],
      ['aggregateId', { aggregateId: 'a ' }],
    ] as const) {
      await assert.rejects(dialect.inboxInsertIfAbsent({ row: { ...row, ...bad } }), (error: unknown) => {
        assert.ok(error instanceof QueueBoxValidationError, String(error));
        assert.equal(error.field, field);
        assert.match(error.message, new RegExp(`InboxService.receive: "${field}" ends with a space`));
        return true;
      });
    }
    const caller = dataSource.createQueryRunner() as unknown as { manager: never };
    const message = { messageId: 'aaaaaaaa-0000-4000-8000-000000000000', payloadJson: '1', headersJson: '{}', availableAt: null };
    for (const [field, bad] of [
      ['destination', { destination: 'billing ', key: null }],
      ['key', { destination: 'billing', key: 'k ' }],
    ] as const) {
      await assert.rejects(
        dialect.outboxInsert({ manager: caller.manager, rows: [{ ...message, ...bad }] }),
        (error: unknown) => error instanceof QueueBoxValidationError && error.field === field,
      );
    }
    assert.deepEqual(
      calls.filter((c) => c.what === 'query'),
      [],
      'nothing was sent',
    );
    // Leading and inner spaces, and other trailing white space, compare exactly and pass.
    assert.deepEqual(await dialect.inboxInsertIfAbsent({ row: { ...row, idempotencyKey: ' e 1\t' } }), { id: '1', duplicate: false });
  });
});

describe('SQL Server key collation (migration 004): distinct keys stay distinct', () => {
  const tables = tablesFor('messaging.events_out', 'messaging.events_in');
  const KEY_COLUMNS = { outbox: ['destination', 'key'], inbox: ['source', 'idempotency_key', 'aggregate_id'] } as const;
  const earlier = [...sqlServerSchemaUp(tables), ...sqlServerOperationsUp(tables), ...sqlServerClaimsUp(tables)];
  const indexName = (statement: string) => /^CREATE (?:UNIQUE )?INDEX \[([^\]]+)\]/.exec(statement)?.[1];

  it('moves every compared key column to Latin1_General_100_BIN2 with its 001 type and nullability, and back on down', () => {
    assert.equal(KEY_COLLATION, 'Latin1_General_100_BIN2');
    const up = sqlServerKeyCollationUp(tables);
    assert.deepEqual(
      up.filter((s) => s.includes('ALTER COLUMN')),
      [
        '[messaging].[events_out] ALTER COLUMN [destination] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL',
        '[messaging].[events_out] ALTER COLUMN [key] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NULL',
        '[messaging].[events_in] ALTER COLUMN [source] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL',
        '[messaging].[events_in] ALTER COLUMN [idempotency_key] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL',
        '[messaging].[events_in] ALTER COLUMN [aggregate_id] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NULL',
      ].map((s) => `ALTER TABLE ${s}`),
    );
    const created = sqlServerSchemaUp(tables).join('\n');
    for (const [kind, columns] of Object.entries(KEY_COLUMNS)) {
      for (const column of columns) {
        assert.match(created, new RegExp(`\\[${column}\\] NVARCHAR\\(255\\) (NOT )?NULL`), `${kind}.${column} as 001 declares it`);
      }
    }
    assert.ok(
      sqlServerKeyCollationDown(tables)
        .filter((s) => s.includes('ALTER COLUMN'))
        .every((s) => s.includes('COLLATE DATABASE_DEFAULT')),
    );
  });

  it('drops every index of 001-003 that depends on a key column (key, INCLUDE or filter) and creates it again exactly', () => {
    for (const statements of [sqlServerKeyCollationUp(tables), sqlServerKeyCollationDown(tables)]) {
      const dependent = earlier.filter((s) => indexName(s) && /\[(destination|key|source|idempotency_key|aggregate_id)\]/.test(s));
      assert.ok(dependent.length >= 11, `found ${dependent.length} dependent indexes`);
      const alters = statements.map((s, n) => (s.includes('ALTER COLUMN') ? n : -1)).filter((n) => n >= 0);
      for (const index of dependent) {
        const name = indexName(index) as string;
        const on = index.includes('[events_out]') ? '[messaging].[events_out]' : '[messaging].[events_in]';
        const dropAt = statements.indexOf(`DROP INDEX IF EXISTS [${name}] ON ${on}`);
        const createAt = statements.findIndex((s) => s.endsWith(`EXEC (N'${index.replaceAll("'", "''")}' + @online)`));
        const columnAlters = alters.filter((n) => statements[n].startsWith(`ALTER TABLE ${on}`));
        assert.ok(dropAt >= 0 && dropAt < Math.min(...columnAlters), `${name} dropped before its table's columns change`);
        assert.ok(createAt > Math.max(...columnAlters), `${name} created again, as 001-003 do, after the change`);
      }
      // Indexes on other columns only are left alone.
      assert.ok(!statements.some((s) => s.includes('events_out_lease_idx') || s.includes('events_out_sent_idx')));
      const unique = 'CONSTRAINT [events_in_source_idempotency_key_key]';
      const dropUnique = statements.indexOf(`ALTER TABLE [messaging].[events_in] DROP ${unique}`);
      const addUnique = statements.indexOf(`ALTER TABLE [messaging].[events_in] ADD ${unique} UNIQUE ([source], [idempotency_key])`);
      const inboxAlters = alters.filter((n) => statements[n].startsWith('ALTER TABLE [messaging].[events_in]'));
      assert.ok(
        dropUnique >= 0 && dropUnique < Math.min(...inboxAlters) && addUnique > Math.max(...inboxAlters),
        'the dedupe constraint too',
      );
      assert.deepEqual(statements.slice(0, 2), ['SET ANSI_NULLS ON', 'SET QUOTED_IDENTIFIER ON']);
    }
  });

  it('statements compare key columns only with parameters, variables or text that names the key collation (never error 468)', () => {
    for (const statement of [sql.inboxRelayClaimSql(T), sql.inboxPullClaimSql(T)]) {
      assert.match(
        statement,
        /DECLARE @sources TABLE \(\[n\] INT IDENTITY\(1, 1\) PRIMARY KEY, \[source\] NVARCHAR\(255\) COLLATE Latin1_General_100_BIN2 NOT NULL\);/,
      );
    }
    assert.match(sql.inboxReclaimSql(T), /\[source\] IN \(SELECT s\.\[source\] COLLATE Latin1_General_100_BIN2 FROM OPENJSON\(@1\)/);
    // No other table variable or OPENJSON column is compared with a key column.
    for (const { name, statement } of ALL_STATEMENTS) {
      for (const match of statement.matchAll(/DECLARE @\w+ TABLE \(([^;]*)\);/g)) {
        if (/NVARCHAR/.test(match[1])) assert.match(match[1], /COLLATE Latin1_General_100_BIN2/, name);
      }
    }
  });
});

describe('SQL Server migration 004 on a live database', () => {
  const tables = tablesFor('messaging.events_out', 'messaging.events_in');
  const dependentIndexes = [...sqlServerSchemaUp(tables), ...sqlServerOperationsUp(tables), ...sqlServerClaimsUp(tables)]
    .filter((s) => /^CREATE (UNIQUE )?INDEX/.test(s) && /\[(destination|key|source|idempotency_key|aggregate_id)\]/.test(s))
    .map((s) => /^CREATE (?:UNIQUE )?INDEX \[([^\]]+)\]/.exec(s)?.[1] as string);

  for (const [direction, statements] of [
    ['up', sqlServerKeyCollationUp(tables)],
    ['down', sqlServerKeyCollationDown(tables)],
  ] as const) {
    it(`${direction}: refuses first, naming them, objects that would stop ALTER COLUMN ... COLLATE (not QueueBox's own indexes)`, () => {
      const check = statements[2];
      const firstChange = statements.findIndex((s) => s.startsWith('DROP ') || s.startsWith('ALTER TABLE'));
      assert.ok(firstChange > 2, 'before anything changes');
      assert.match(check, /^DECLARE @key_columns TABLE /);
      assert.match(check, /c\.\[object_id\] = OBJECT_ID\(N'\[messaging\]\.\[events_out\]'\) AND c\.\[name\] IN \(N'destination', N'key'\)/);
      assert.match(
        check,
        /c\.\[object_id\] = OBJECT_ID\(N'\[messaging\]\.\[events_in\]'\) AND c\.\[name\] IN \(N'source', N'idempotency_key', N'aggregate_id'\)/,
      );
      for (const source of [
        'sys.stats',
        'sys.indexes',
        'sys.foreign_key_columns',
        'sys.sql_expression_dependencies',
        'sys.fulltext_index_columns',
      ]) {
        assert.ok(check.includes(`FROM ${source} AS`), source);
      }
      assert.match(check, /WHERE s\.\[user_created\] = 1\n/, 'statistics SQL Server created itself are dropped by ALTER COLUMN');
      const own = /i\.\[name\] NOT IN \(([^)]*)\)/
        .exec(check)?.[1]
        .split(', ')
        .map((n) => n.replace(/^N'|'$/g, ''));
      assert.deepEqual(own?.sort(), [...dependentIndexes, 'events_in_source_idempotency_key_key'].sort());
      assert.match(
        check,
        /i\.\[filter_definition\] LIKE N'%\[\[\]' \+ c\.\[name\] \+ N'\]%'/,
        'an index that names the column in its filter only',
      );
      assert.match(
        check,
        new RegExp(
          `IF @blocking IS NOT NULL\\nBEGIN\\n {2}RAISERROR\\(N'QueueBox migration 004 \\(${direction}\\) changed nothing: %s depend on the key columns.*', 16, 1, @blocking\\);\\n {2}SET NOEXEC ON;\\nEND$`,
        ),
      );
      assert.equal(statements.at(-1), 'SET NOEXEC OFF', 'the plain script runs again after a refused check');
    });

    it(`${direction}: creates every index again ONLINE where the edition allows and no transaction is open, else as before`, () => {
      const creates = statements.filter((s) => s.includes('CREATE INDEX') || s.includes('CREATE UNIQUE INDEX'));
      assert.equal(creates.length, dependentIndexes.length);
      for (const statement of creates) {
        assert.ok(
          statement.startsWith(`DECLARE @online NVARCHAR(20) = CASE WHEN @@TRANCOUNT = 0 AND CAST(SERVERPROPERTY('EngineEdition') AS INT) IN (3, 5, 8)
  THEN N' WITH (ONLINE = ON)' ELSE N'' END;
EXEC (N'CREATE `),
          statement,
        );
        assert.ok(statement.endsWith("' + @online)"));
      }
    });
  }

  it('down: refuses first when keys that differ only in case would break a unique index under the default collation', () => {
    const statements = sqlServerKeyCollationDown(tables);
    const check = statements[3];
    assert.ok(statements.findIndex((s) => s.startsWith('DROP ')) > 3);
    assert.match(
      check,
      /SELECT 1 FROM \[messaging\]\.\[events_in\] GROUP BY \[source\] COLLATE DATABASE_DEFAULT, \[idempotency_key\] COLLATE DATABASE_DEFAULT HAVING COUNT\(\*\) > 1/,
    );
    assert.match(
      check,
      /SELECT 1 FROM \[messaging\]\.\[events_out\] WHERE \[state\] = N'processing' AND \[key\] IS NOT NULL GROUP BY \[key\] COLLATE DATABASE_DEFAULT HAVING COUNT\(\*\) > 1/,
    );
    assert.match(check, /GROUP BY \[source\] COLLATE DATABASE_DEFAULT, \[aggregate_id\] COLLATE DATABASE_DEFAULT HAVING COUNT\(\*\) > 1/);
    assert.match(
      check,
      /IF @collisions <> N''\nBEGIN\n {2}RAISERROR\(N'QueueBox migration 004 \(down\) changed nothing: .*', 16, 1, @collisions\);\n {2}SET NOEXEC ON;\nEND$/,
    );
    assert.ok(!sqlServerKeyCollationUp(tables).some((s) => s.includes('@collisions')), 'up has nothing to collide');
  });
});
