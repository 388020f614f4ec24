// The PostgreSQL outbox claim with paused destinations (migration 010): its text, checked without
// a database (test/integration/pauses.test.ts runs it).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CLAIM_SCAN_WINDOW, outboxClaimSql } from '../../lib/dialects/postgres/claims.sql';

const T = '"messaging"."events_out"';

describe('PostgreSQL: the outbox claim with paused destinations', () => {
  it('without pauses, the claim is the one the claim function holds: no fourth parameter', () => {
    assert.doesNotMatch(outboxClaimSql(T), /\$4|destination <> ALL/);
  });

  it('passes over paused destinations in each search, after the scan window, and never in the head probes', () => {
    const paused = outboxClaimSql(T, undefined, '$4::text[]');
    const filters = [...paused.matchAll(/AND (\w)\.destination <> ALL \(\$4::text\[\]\)/g)].map((m) => m[1]);
    assert.deepEqual(filters, ['s', 'h', 'o'], 'near (outside the window), far heads, rows without a key');
    // The window reads the oldest rows whatever their destination; the filter comes after its LIMIT.
    assert.match(paused, new RegExp(`LIMIT ${CLAIM_SCAN_WINDOW}\\n  \\) s\\n  WHERE [\\s\\S]*AND s\\.destination <> ALL`));
    const probes = (text: string) => [...text.matchAll(/e\.state IN \('pending', 'processing'\)/g)].length;
    assert.equal(probes(paused), probes(outboxClaimSql(T)), 'the head probes still see every unfinished row');
  });
});
