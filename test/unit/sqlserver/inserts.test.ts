// SQL Server inserts (the outbox batch insert, its onDuplicate: 'ignore' variant, the inbox
// insert): how the dialect sends them, and the shape of their statements.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createDialect } from '../../../lib/core/create-dialect';
import { scriptedDataSource, sql, sqlError, T, TABLES, typed } from '../../support/sqlserver';

describe('SQL Server inserts: how the dialect sends them', () => {
  it('the inbox insert: no row back is a duplicate, looked up in the same transaction; an error of the insert reaches the caller', async () => {
    const { dataSource, calls } = scriptedDataSource((statement) =>
      statement === sql.inboxInsertSql('[queuebox_inbox]') ? { records: [] } : { records: [{ id: '41' }] },
    );
    const row = { source: 'orders', idempotencyKey: 'e1', aggregateId: null, payloadJson: '{}', headersJson: '{}' };
    const caller = dataSource.createQueryRunner() as unknown as { id: number; manager: never; startTransaction(): Promise<void> };
    await caller.startTransaction();
    assert.deepEqual(await createDialect(dataSource, TABLES).inboxInsertIfAbsent({ row, manager: caller.manager }), {
      id: '41',
      duplicate: true,
    });
    assert.deepEqual(
      calls.filter((c) => c.what === 'query').map((c) => [c.runner, c.sql === sql.inboxInsertSql('[queuebox_inbox]') ? 'insert' : 'find']),
      [
        [caller.id, 'insert'],
        [caller.id, 'find'],
      ],
    );
    // The batch catches the unique violations itself; what it lets through (a transaction it cannot keep, any other error) is the caller's.
    for (const number of [547, 2627]) {
      const failing = scriptedDataSource(() => sqlError(number));
      await assert.rejects(
        createDialect(failing.dataSource, TABLES).inboxInsertIfAbsent({ row }),
        new RegExp(`SQL Server error ${number}`),
      );
    }
  });

  it('the batch insert sends every row in one JSON parameter and returns ids in input order', async () => {
    const { dataSource, calls } = scriptedDataSource(() => ({
      records: [
        { id: '2', message_id: 'BBBBBBBB-0000-4000-8000-000000000000' },
        { id: '1', message_id: 'AAAAAAAA-0000-4000-8000-000000000000' },
      ],
    }));
    const caller = dataSource.createQueryRunner() as unknown as { manager: never };
    const at = new Date('2030-05-06T07:08:09.010Z');
    const result = await createDialect(dataSource, TABLES).outboxInsert({
      manager: caller.manager,
      rows: [
        {
          messageId: 'aaaaaaaa-0000-4000-8000-000000000000',
          destination: 'd',
          key: null,
          payloadJson: '1',
          headersJson: '{}',
          availableAt: at,
        },
        {
          messageId: 'bbbbbbbb-0000-4000-8000-000000000000',
          destination: 'd',
          key: 'k',
          payloadJson: '"x"',
          headersJson: '{}',
          availableAt: null,
        },
      ],
    });
    assert.deepEqual(
      result.map((r) => r.id),
      ['1', '2'],
    );
    const [json] = typed(calls.at(-1)?.params) as [[string, string]];
    assert.equal(json[0], 'nvarchar');
    assert.deepEqual(JSON.parse(json[1]), [
      {
        messageId: 'aaaaaaaa-0000-4000-8000-000000000000',
        destination: 'd',
        key: null,
        payload: '1',
        headers: '{}',
        availableAt: at.toISOString(),
      },
      { messageId: 'bbbbbbbb-0000-4000-8000-000000000000', destination: 'd', key: 'k', payload: '"x"', headers: '{}', availableAt: null },
    ]);
  });

  it("onDuplicate: 'ignore': skips held ids in the insert, reads their rows after it in the caller's transaction, in input order", async () => {
    const held = 'aaaaaaaa-0000-4000-8000-000000000000';
    const fresh = 'bbbbbbbb-0000-4000-8000-000000000000';
    const { dataSource, calls } = scriptedDataSource((statement) => {
      if (statement === sql.outboxInsertIfAbsentSql('[queuebox_outbox]'))
        return { records: [{ id: '9', message_id: fresh.toUpperCase() }] };
      if (statement === sql.outboxFindSql('[queuebox_outbox]')) return { records: [{ id: '3', message_id: held.toUpperCase() }] };
      return new Error(`unexpected statement ${statement.slice(0, 40)}`);
    });
    const caller = dataSource.createQueryRunner() as unknown as { id: number; manager: never };
    const row = (messageId: string) => ({ messageId, destination: 'd', key: null, payloadJson: '1', headersJson: '{}', availableAt: null });
    const result = await createDialect(dataSource, TABLES).outboxInsert({
      manager: caller.manager,
      rows: [row(held), row(fresh)],
      ifAbsent: true,
    });
    assert.deepEqual(result, [
      { messageId: held, id: '3', duplicate: true },
      { messageId: fresh, id: '9', duplicate: false },
    ]);
    const queries = calls.filter((c) => c.what === 'query');
    assert.deepEqual(
      queries.map((c) => [c.runner, c.sql]),
      [
        [caller.id, sql.outboxInsertIfAbsentSql('[queuebox_outbox]')],
        [caller.id, sql.outboxFindSql('[queuebox_outbox]')],
      ],
    );
    assert.deepEqual(typed(queries[1].params), [['nvarchar', JSON.stringify([held]), 65535]]);
  });

  it('sends a payload and headers holding quotes and backslashes as JSON string values that decode to their text exactly', async () => {
    const { dataSource, calls } = scriptedDataSource(() => ({
      records: [{ id: '1', message_id: 'AAAAAAAA-0000-4000-8000-000000000000' }],
    }));
    const caller = dataSource.createQueryRunner() as unknown as { manager: never };
    const payload = {
      'we"ird\\key': 'a "quoted" \\ back\\slash \\"both\\" \\\\ two \\n not a newline\nreal newline \u0001 \u2028 zäh 💡 </script>',
    };
    const headers = { 'X-Q': 'say "hi" \\ bye' };
    const payloadJson = JSON.stringify(payload);
    const headersJson = JSON.stringify(headers);
    await createDialect(dataSource, TABLES).outboxInsert({
      manager: caller.manager,
      rows: [
        { messageId: 'aaaaaaaa-0000-4000-8000-000000000000', destination: 'd', key: null, payloadJson, headersJson, availableAt: null },
      ],
    });
    const [[type, text]] = typed(calls.at(-1)?.params) as [[string, string]];
    assert.equal(type, 'nvarchar');
    // OPENJSON ... WITH ([payload] NVARCHAR(MAX) '$.payload') returns the string value unescaped: JSON.parse says what that is.
    const [sent] = JSON.parse(text);
    assert.equal(sent.payload, payloadJson, 'the payload text, exactly');
    assert.equal(sent.headers, headersJson);
    assert.deepEqual(JSON.parse(sent.payload), payload);
  });
});

describe('SQL Server inserts: statement shape', () => {
  it('the batch insert is one statement with one JSON parameter, identities in input order', () => {
    const statement = sql.outboxInsertSql(T);
    assert.match(statement, /FROM OPENJSON\(@0\) AS j\nCROSS APPLY OPENJSON\(j\.\[value\]\) WITH \(/);
    assert.match(statement, /ORDER BY CAST\(j\.\[key\] AS INT\)$/);
    assert.match(statement, /OUTPUT inserted\.\[id\], inserted\.\[message_id\]/);
  });

  it('the inbox insert lets the unique constraint decide, takes no range lock, and answers a duplicate with no row', () => {
    const statement = sql.inboxInsertSql(T);
    assert.doesNotMatch(statement, /UPDLOCK|HOLDLOCK|SERIALIZABLE|NOT EXISTS/, 'no lock on the range of keys after this one');
    assert.equal(
      statement,
      `SET XACT_ABORT OFF;
SET NOCOUNT ON;
DECLARE @inserted TABLE ([id] BIGINT NOT NULL);
BEGIN TRY
  INSERT INTO [messaging].[events_out] WITH (ROWLOCK) ([source], [idempotency_key], [aggregate_id], [payload], [headers])
  OUTPUT inserted.[id] INTO @inserted ([id])
  VALUES (@0, @1, @2, @3, @4);
END TRY
BEGIN CATCH
  IF ERROR_NUMBER() NOT IN (2601, 2627) OR XACT_STATE() = -1
    THROW;
END CATCH;
SELECT [id] FROM @inserted;`,
    );
    // XACT_ABORT OFF before anything else: a duplicate must not doom the caller's transaction.
    assert.ok(statement.startsWith('SET XACT_ABORT OFF;\n'));
    assert.deepEqual([...sql.UNIQUE_VIOLATIONS], [2601, 2627]);
  });

  it("the insert of onDuplicate: 'ignore' lets the unique constraint decide, takes no range lock, and falls back to one row at a time in input order", () => {
    const statement = sql.outboxInsertIfAbsentSql(T);
    assert.doesNotMatch(statement, /UPDLOCK|HOLDLOCK|SERIALIZABLE/, 'no lock on the range of ids around each new one');
    // XACT_ABORT OFF before anything else: a caught duplicate must not doom the caller's transaction.
    assert.ok(statement.startsWith('SET XACT_ABORT OFF;\nSET NOCOUNT ON;\n'), statement);
    // The batch is the plain insert's rows, past the ids already committed, into the table variable.
    const rows = sql.outboxInsertSql(T).split('\n').slice(2, -1).join('\n');
    const batch = statement.slice(statement.indexOf('BEGIN TRY'), statement.indexOf('END TRY'));
    assert.ok(batch.includes(`  ${rows}`), batch);
    assert.match(batch, /OUTPUT inserted\.\[id\], inserted\.\[message_id\] INTO @inserted/);
    assert.match(
      batch,
      /WHERE NOT EXISTS \(SELECT 1 FROM \[messaging\]\.\[events_out\] AS o WHERE o\.\[message_id\] = m\.\[message_id\]\)\n {2}ORDER BY CAST\(j\.\[key\] AS INT\);/,
    );
    // Only a unique violation is caught, twice (the batch, then each row); anything else, or a doomed transaction, is thrown.
    assert.equal(statement.match(/IF ERROR_NUMBER\(\) NOT IN \(2601, 2627\) OR XACT_STATE\(\) = -1\n\s+THROW;/g)?.length, 2);
    // The fallback forgets what the failed batch may have output, then inserts row @row of the array, for @row = 0, 1, ...
    assert.match(
      statement,
      /BEGIN CATCH\n[\s\S]*?DELETE FROM @inserted;\n {2}DECLARE @row INT = 0;[\s\S]*WHILE @row < @rows[\s\S]*WHERE CAST\(j\.\[key\] AS INT\) = @row\n[\s\S]*SET @row \+= 1;/,
    );
    assert.ok(statement.endsWith('SELECT [id], [message_id] FROM @inserted ORDER BY [id];'));
    assert.match(sql.outboxFindSql(T), /WHERE \[message_id\] IN \(SELECT CAST\(\[value\] AS UNIQUEIDENTIFIER\) FROM OPENJSON\(@0\)\)$/);
  });

  it('reads payload and headers as JSON string values (unescaped by OPENJSON), never AS JSON', () => {
    const statement = sql.outboxInsertSql(T);
    assert.match(statement, /\n {2}\[payload\] NVARCHAR\(MAX\) '\$\.payload',\n/);
    assert.match(statement, /\n {2}\[headers\] NVARCHAR\(MAX\) '\$\.headers',\n/);
    assert.doesNotMatch(statement, /AS JSON/);
    assert.match(statement, /SELECT m\.\[message_id\], m\.\[destination\], m\.\[key\], m\.\[payload\], m\.\[headers\],/, 'stored as read');
  });
});
