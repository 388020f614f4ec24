// The SQL Server statements of the message browser and the long history, without a server: each
// shape parses as T-SQL, every value travels as a typed parameter (never in the text), paths become
// JSON_VALUE paths, and the dialect asks where a bounded scan stopped only when it must.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createDialect } from '../../../lib/core/create-dialect';
import type { MessageSearch } from '../../../lib/dialects/message-rows';
import * as messages from '../../../lib/dialects/sqlserver/messages.sql';
import { QueueBoxValidationError } from '../../../lib/errors/queuebox.errors';
import { COMPONENTS, scriptedDataSource, T, TABLES, tsqlSyntaxErrors, typed } from '../../support/sqlserver';

const HOSTILE = "'); DROP TABLE [x]; --";

const search = (p: Partial<MessageSearch> = {}): MessageSearch => ({
  component: 'outbox',
  rowId: null,
  messageId: null,
  name: null,
  key: null,
  state: null,
  timeField: 'created',
  since: null,
  until: null,
  path: null,
  beforeId: null,
  limit: 50,
  scanLimit: 100_000,
  includePayload: false,
  ...p,
});

const SHAPES: [string, Partial<MessageSearch>][] = [
  ['no criterion (bounded scan)', {}],
  ['message id', { messageId: '6f1c1f7e-3a3b-4c1e-9a59-0d5c4f1b2a10' }],
  ['row id with payload', { rowId: '42', includePayload: true, limit: 1 }],
  ['state dead (filtered index)', { state: 'dead', name: 'billing' }],
  ['state sent (bounded scan)', { state: 'sent', key: HOSTILE }],
  ['finished window', { timeField: 'finished', since: new Date('2026-12-01T00:00:00Z'), until: new Date('2026-12-02T00:00:00Z') }],
  ['payload path after a cursor', { path: { in: 'payload', segments: ['order', 'lines', '0', 'sku'], equals: HOSTILE }, beforeId: '100' }],
  ['header', { path: { in: 'headers', segments: ['x-tenant'], equals: 'acme' } }],
];

describe('SQL Server message browser statements', () => {
  for (const component of COMPONENTS) {
    for (const [name, given] of SHAPES) {
      it(`${component}, ${name}: parses as T-SQL, and no value is written into the statement`, () => {
        const s = search({ component, ...given, ...(component === 'inbox' && given.messageId ? { messageId: 'k1' } : {}) });
        const statement = messages.messageSearchSql(T, component, s);
        assert.deepEqual(tsqlSyntaxErrors(statement.sql), [], statement.sql);
        assert.ok(!statement.sql.includes('DROP'), 'hostile values are parameters');
        assert.ok(!statement.sql.includes('order'), 'paths are parameters');
        const placeholders = new Set(statement.sql.match(/@\d+/g));
        assert.equal(placeholders.size, statement.params.length, 'one placeholder per parameter');
        assert.match(statement.sql, /ORDER BY \[id\] DESC\s+OPTION \(RECOMPILE\)$/);
      });
    }
  }

  it('picks the plan from the criteria: message id, a filtered-index state, otherwise TOP (@scan) of the primary key', () => {
    const plan = (p: Partial<MessageSearch>) => messages.messageSearchSql(T, p.component ?? 'outbox', search(p)).plan;
    assert.equal(plan({ messageId: '6f1c1f7e-3a3b-4c1e-9a59-0d5c4f1b2a10' }), 'message-id');
    assert.equal(plan({ component: 'inbox', messageId: 'k1' }), 'bounded-scan', 'an idempotency key alone: no index leads with it');
    assert.equal(plan({ component: 'inbox', messageId: 'k1', name: 'payments' }), 'message-id');
    assert.equal(plan({ state: 'pending' }), 'state-index');
    assert.equal(plan({ state: 'processing' }), 'state-index');
    assert.equal(plan({ state: 'sent' }), 'bounded-scan');
    const scan = messages.messageSearchSql(T, 'outbox', search({ key: 'k' }));
    assert.match(scan.sql, /FROM \(SELECT TOP \(@\d+\) \* FROM \[messaging\]\.\[events_out\] WHERE 1 = 1 ORDER BY \[id\] DESC\) AS w/);
  });

  it('paths become JSON_VALUE paths with quoted keys and array indexes, sent as NVARCHAR(4000)', () => {
    assert.equal(messages.jsonPathOf(['order', 'lines', '0', 'sku']), '$."order"."lines"[0]."sku"');
    const statement = messages.messageSearchSql(T, 'outbox', search({ path: { in: 'headers', segments: ['x-tenant'], equals: HOSTILE } }));
    assert.match(statement.sql, /JSON_VALUE\(\[headers\], @0\) = @1/);
    assert.deepEqual(typed(statement.params).slice(0, 2), [
      ['nvarchar', '$."x-tenant"', 4000],
      ['nvarchar', HOSTILE, 4000],
    ]);
  });

  it('time bounds are sent as ISO-8601 UTC text and read as UTC; the finished window reads sent_at / processed_at', () => {
    const s = search({ component: 'inbox', timeField: 'finished', since: new Date('2026-12-01T00:00:00Z') });
    const statement = messages.messageSearchSql(T, 'inbox', s);
    assert.match(statement.sql, /\[processed_at\] >= CAST\(SWITCHOFFSET\(CAST\(@0 AS DATETIMEOFFSET\), '\+00:00'\) AS DATETIME2\)/);
    assert.deepEqual(typed(statement.params)[0], ['nvarchar', '2026-12-01T00:00:00.000Z', 30]);
  });

  it('refuses a name, key or idempotency key longer than its 255-character column, naming the field', () => {
    for (const field of ['name', 'key', 'messageId'] as const) {
      assert.throws(
        () => messages.messageSearchSql(T, 'inbox', search({ component: 'inbox', [field]: 'k'.repeat(256) })),
        (e: unknown) => e instanceof QueueBoxValidationError && e.field === field && e.code === 'QUEUEBOX_ADMIN_ARGUMENT',
      );
    }
  });

  it('the scan-end and history statements parse as T-SQL', () => {
    assert.deepEqual(tsqlSyntaxErrors(messages.messageScanEndSql(T, '10', 5).sql), []);
    const history = messages.adminHistorySql('[queuebox_outbox]', '[queuebox_inbox]');
    assert.deepEqual(tsqlSyntaxErrors(history), [], history);
    const perComponent = messages.adminHistorySql('[queuebox_outbox]', '[queuebox_inbox]', false);
    assert.deepEqual(tsqlSyntaxErrors(perComponent), [], perComponent);
    assert.ok(!perComponent.includes('[destination]') && !perComponent.includes('[source]'), 'per component: no name column is read');
    assert.match(
      history,
      /DATEDIFF_BIG\(SECOND, CAST\(SWITCHOFFSET\(CAST\(@0 AS DATETIMEOFFSET\), '\+00:00'\) AS DATETIME2\), \[sent_at\]\) \/ @1/,
    );
    assert.match(history, /\[sent_at\] < CAST\(SWITCHOFFSET\(CAST\(@2 AS DATETIMEOFFSET\), '\+00:00'\) AS DATETIME2\)/, 'counted up to @2');
  });

  it('the dialect asks where a bounded scan stopped only when the page is not full, and reports the lowest id examined', async () => {
    const { dataSource, calls } = scriptedDataSource((statement) => {
      if (statement.startsWith('SELECT MIN([id])')) return { records: [{ low: '901', n: '100' }] };
      return { records: [] };
    });
    const dialect = createDialect(dataSource, TABLES);
    const result = await dialect.messageSearch(search({ key: 'k', scanLimit: 100, beforeId: '1001' }));
    assert.deepEqual(result, { rows: [], plan: 'bounded-scan', scannedTo: '901' });
    const queries = calls.filter((c) => c.what === 'query');
    assert.equal(queries.length, 2);
    assert.ok(
      queries.every((q) => q.admin),
      'both are admin statements (low deadlock priority, bounded lock wait)',
    );
    assert.deepEqual(typed(queries[1].params), [
      ['bigint', '1001'],
      ['int', 100],
    ]);
    const indexed = scriptedDataSource(() => ({ records: [] }));
    await createDialect(indexed.dataSource, TABLES).messageSearch(search({ state: 'dead' }));
    assert.equal(indexed.calls.filter((c) => c.what === 'query').length, 1, 'an indexed search has no scan to report');
  });
});
