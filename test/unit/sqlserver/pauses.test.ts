// The SQL Server side of pauses (migration 010): the outbox claim that passes over paused
// destinations, and the pauses table's statements. No SQL Server runs here: the statement text is
// checked (each also parses as T-SQL in statements.test.ts, through the builders of support/sqlserver).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { outboxClaimPausedSql, outboxClaimSql } from '../../../lib/dialects/sqlserver/claims.sql';
import { pauseDeleteSql, pauseInsertSql, pauseListSql } from '../../../lib/dialects/sqlserver/pauses.sql';
import { sqlServerPausesUp } from '../../../lib/dialects/sqlserver/schema';
import { resolveTables } from '../../../lib/options/options.resolver';

const T = '[messaging].[events_out]';
const NOT_PAUSED = /NOT EXISTS \(SELECT 1 FROM @paused AS p WHERE p\.\[destination\] = (\w)\.\[destination\]\)/g;

describe('SQL Server: the outbox claim with paused destinations', () => {
  it('without pauses, the claim is the one it always was: no @paused, no fifth parameter', () => {
    const plain = outboxClaimSql(T);
    assert.doesNotMatch(plain, /@paused|@4|\[destination\] NVARCHAR/);
  });

  it('reads the paused names from @4 into a byte-wise table and passes over them in every search: the pages, the rows without a key and the walk', () => {
    const paused = outboxClaimPausedSql(T);
    assert.match(
      paused,
      /DECLARE @paused TABLE \(\[destination\] NVARCHAR\(255\) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY\);\s+INSERT INTO @paused \(\[destination\]\) SELECT DISTINCT p\.\[destination\] FROM OPENJSON\(@4\)/,
    );
    // Each search's candidates, by alias: w (a page's heads), o (rows without a key), h (the walk's head).
    assert.deepEqual(
      [...paused.matchAll(NOT_PAUSED)].map((m) => m[1]),
      ['w', 'o', 'h'],
    );
    assert.match(
      paused,
      /INSERT INTO @page \(\[available_at\], \[id\], \[key\], \[destination\]\)/,
      'the page keeps each row’s destination',
    );
    // The head probes are untouched: a paused row stays the earliest unfinished row of its key.
    const probes = (text: string) => [...text.matchAll(/key_idx.*?\[id\] < /gs)].length;
    assert.equal(probes(paused), probes(outboxClaimSql(T)));
  });
});

describe('SQL Server: the pauses table', () => {
  it('is keyed by component and name, the name compared byte-wise, paused_at by the database clock in UTC', () => {
    const [create] = sqlServerPausesUp(resolveTables({ outbox: 'messaging.events_out', inbox: 'messaging.events_in' }));
    assert.match(create, /CREATE TABLE \[messaging\]\.\[events_out_pauses\]/);
    assert.match(create, /\[name\] NVARCHAR\(255\) COLLATE Latin1_General_100_BIN2 NOT NULL/);
    assert.match(create, /DEFAULT SYSUTCDATETIME\(\)/);
    assert.match(create, /PRIMARY KEY CLUSTERED \(\[component\], \[name\]\)/);
  });

  it('inserts a pause once (UPDLOCK, HOLDLOCK), returns what it inserted or deleted, and lists paused_at as epoch milliseconds', () => {
    assert.match(
      pauseInsertSql(T),
      /OUTPUT inserted\.\[name\][\s\S]*WHERE NOT EXISTS \(SELECT 1 FROM \[messaging\]\.\[events_out\] WITH \(UPDLOCK, HOLDLOCK\)/,
    );
    assert.match(pauseDeleteSql(T), /OUTPUT deleted\.\[name\]\s+WHERE \[component\] = @0 AND \[name\] = @1/);
    assert.match(pauseListSql(T), /DATEDIFF_BIG\(MILLISECOND, '19700101', \[paused_at\]\) AS \[paused_at_ms\]/);
  });
});
