import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import type { DataSource } from 'typeorm';
import { createDialect } from '../../lib/core/create-dialect';
import type { Dialect } from '../../lib/dialects/dialect';
import { resolveOptions } from '../../lib/options/options.resolver';
import { describeWithDatabase } from '../support/database';
import { explainedSession } from '../support/explained-session';

// PL/pgSQL keeps a claim function's plans for the session, made with the statistics of its first
// call; only an ANALYZE or a VACUUM of the table makes it plan again. A session whose first claim
// found the tables empty (a new installation, a server with autovacuum off) kept sequential scans
// for every later claim: 35 ms a claim of rows without a key and 198 ms a keyed one at 70,000 rows.
// Migration 014 sets the functions to plan with their indexes. Here one session claims from the
// empty tables, the tables grow without an ANALYZE, and every plan the session then runs inside
// the functions is read from auto_explain (nested statements, as notices of the session).

const FINISHED_ROWS = 5_000;

describeWithDatabase('claim functions planned on empty tables still claim through their indexes once the tables grow', (db) => {
  let dataSource: DataSource;
  let dialect: Dialect;
  /** auto_explain's plans, as the notices of the pool's one session. */
  let plans: string[] = [];

  before(async () => {
    // No autovacuum on the test's tables: an ANALYZE would make the session plan again and hide the fault.
    await db.query('ALTER TABLE queuebox_outbox SET (autovacuum_enabled = off)');
    await db.query('ALTER TABLE queuebox_inbox SET (autovacuum_enabled = off)');
    // One connection: every claim runs on the session whose first claims found the tables empty.
    ({ dataSource, plans } = await explainedSession(db, ['auto_explain.log_nested_statements = on']));
    dialect = createDialect(dataSource, resolveOptions({ workers: false }).tables);
  });
  after(() => dataSource?.destroy());

  /** Claims of every kind and branch: rows without a key, then (one keyed row added and claimed) the keyed branch. */
  async function claimEveryBranch(): Promise<number> {
    let claimed = 0;
    const claimAll = async () => {
      claimed += (await dialect.outboxClaimBatch({ limit: 50, leaseMs: 60_000 })).length;
      claimed += (await dialect.inboxRelayClaimBatch({ sources: ['relayed'], limit: 50, leaseMs: 60_000 })).length;
      claimed += (await dialect.inboxPullClaimBatch({ source: 'pulled', limit: 50, leaseMs: 60_000 })).length;
    };
    await claimAll(); // no keyed row unfinished: the branch without locks
    await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, "key") VALUES (gen_random_uuid(), 'd', '{}', 'k')`);
    await db.query(
      `INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload)
       SELECT s, gen_random_uuid()::text, 'a', '{}' FROM unnest(ARRAY['relayed', 'pulled']) AS s`,
    );
    await claimAll(); // a keyed row unfinished: the keyed branch
    await db.query(`UPDATE queuebox_outbox SET state = 'sent', sent_at = now(), claim_token = NULL WHERE state <> 'sent'`);
    await db.query(`UPDATE queuebox_inbox SET state = 'processed', processed_at = now(), claim_token = NULL WHERE state <> 'processed'`);
    return claimed;
  }

  it('no plan inside the claim functions reads the outbox or the inbox whole', async () => {
    assert.equal(await claimEveryBranch(), 3, 'on the empty tables, the keyed rows only');

    await db.query(
      `INSERT INTO queuebox_outbox (message_id, destination, payload, state, sent_at, "key")
       SELECT gen_random_uuid(), 'd', '{}', 'sent', now(), CASE WHEN i % 2 = 0 THEN 'k' || i % 50 END FROM generate_series(1, $1) AS i`,
      [FINISHED_ROWS],
    );
    await db.query(
      `INSERT INTO queuebox_inbox (source, idempotency_key, payload, state, processed_at, aggregate_id)
       SELECT s, gen_random_uuid()::text, '{}', 'processed', now(), CASE WHEN i % 2 = 0 THEN 'a' || i % 50 END
       FROM generate_series(1, $1) AS i CROSS JOIN unnest(ARRAY['relayed', 'pulled']) AS s`,
      [FINISHED_ROWS],
    );
    await db.query(
      `INSERT INTO queuebox_outbox (message_id, destination, payload) SELECT gen_random_uuid(), 'd', '{}' FROM generate_series(1, 3)`,
    );
    await db.query(
      `INSERT INTO queuebox_inbox (source, idempotency_key, payload)
       SELECT s, gen_random_uuid()::text, '{}' FROM generate_series(1, 3) CROSS JOIN unnest(ARRAY['relayed', 'pulled']) AS s`,
    );
    plans.length = 0;
    assert.equal(await claimEveryBranch(), 12, 'three rows without a key per claim, then the keyed rows');

    const nested = plans.filter((plan) => /claim_token = gen_random_uuid\(\)/.test(plan));
    assert.ok(nested.length >= 6, `each claim's own statements were explained (${nested.length} of ${plans.length} plans)`);
    const wholeReads = plans.filter((plan) => /Seq Scan on queuebox_(outbox|inbox)\b/.test(plan));
    assert.deepEqual(
      wholeReads.map((plan) => plan.slice(0, 400)),
      [],
      'plans that read a table whole inside a claim function',
    );
  });
});
