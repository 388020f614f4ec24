import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { inboxPullClaimSql, inboxRelayClaimSql, outboxClaimSql, serializedClaimSql } from '../../lib/dialects/postgres/claims.sql';
import { inlineParams, pgLiteral } from '../../lib/dialects/postgres/quoting';

// The serialized claim goes as one query string with its values inlined (simple query protocol,
// no parameters). What runs against a server is in test/integration/ordering.test.ts and the
// conformance suite; these check the text without one.

describe('PostgreSQL serialized claim text', () => {
  it('runs at READ COMMITTED, takes the lock first, then the claim, with every placeholder replaced', () => {
    const text = serializedClaimSql('queuebox_outbox_claim_queuebox_outbox', outboxClaimSql('"queuebox_outbox"'), [25, 300_000, null]);
    const [isolation, lock, claim] = text.split(';\n');
    assert.equal(isolation, 'SET TRANSACTION ISOLATION LEVEL READ COMMITTED');
    assert.equal(lock, "SELECT pg_advisory_xact_lock(hashtextextended('queuebox_outbox_claim_queuebox_outbox', 0))");
    assert.match(claim, /^WITH RECURSIVE near AS/);
    assert.match(claim, /LIMIT 25\n/);
    assert.match(claim, /secs => 300000::double precision/);
    assert.doesNotMatch(text, /\$\d/);
  });

  it('inlines the relay sources as a text array and the pull source as a literal', () => {
    const relay = inlineParams(inboxRelayClaimSql('"queuebox_inbox"'), [10, 1000, ['a', "o'brien"], null]);
    assert.match(relay, /unnest\(ARRAY\['a', 'o''brien'\]::text\[\]::text\[\]\)/);
    const pull = inlineParams(inboxPullClaimSql('"queuebox_inbox"'), [1, 1000, 'payments', '4b1a7c1e-0000-4000-8000-000000000001']);
    assert.match(pull, /i\.source = 'payments'/);
    assert.match(pull, /claimed_by = '4b1a7c1e-0000-4000-8000-000000000001'::uuid/, 'the claim names its instance');
    assert.match(relay, /claimed_by = NULL::uuid/, 'no instance: the owner is null');
    assert.doesNotMatch(relay + pull, /\$\d/);
    assert.match(inlineParams('SELECT $1', [[]]), /'\{\}'::text\[\]/);
  });

  it('refuses what it cannot inline safely', () => {
    assert.throws(() => inlineParams('LIMIT $1', [1.5]), /not an integer/);
    assert.throws(() => inlineParams('LIMIT $1', [Number.NaN]), /not an integer/);
    assert.throws(() => inlineParams('LIMIT $2', [1]), /no value for \$2/);
    assert.throws(() => pgLiteral('a\0b'), /NUL/);
  });

  it('quotes strings whatever standard_conforming_strings says', () => {
    assert.equal(pgLiteral("it's"), "'it''s'");
    assert.equal(pgLiteral('a\\b'), " E'a\\\\b'");
    assert.equal(pgLiteral("x\\'; DROP TABLE t; --"), " E'x\\\\''; DROP TABLE t; --'");
  });
});
