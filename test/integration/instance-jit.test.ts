import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, it } from 'node:test';
import type { DataSource } from 'typeorm';
import { createDialect } from '../../lib/core/create-dialect';
import type { Dialect } from '../../lib/dialects/dialect';
import { resolveOptions } from '../../lib/options/options.resolver';
import { describeWithDatabase } from '../support/database';
import { explainedSession } from '../support/explained-session';

// The instance sweep (every replica, at each heartbeat), the instances list (the admin views, the
// instances gauges at each scrape) and the claims and blocked-keys views (each row's owner and its
// state) test instances with subqueries.
// The planner multiplies their cost by its estimate of the instances table (hundreds of rows
// until it is analyzed) and of the rows in flight (stale after a backlog), so at the default
// `jit_above_cost` a server with JIT compiled them: 36-40 ms a sweep in a W5 drain, 734 ms once
// past the optimizing threshold, for well under a millisecond of work. They run with JIT off.
//
// What the server ran is read from auto_explain, loaded into each new session of the test's
// database with `log_settings`: a plan lists the settings that differ from the defaults, `jit`
// among them. It needs no JIT on the server (the embedded builds have none), only auto_explain.

describeWithDatabase('instance statements: the sweep, the instances list and the owner views run with JIT off', (db) => {
  let dataSource: DataSource;
  let dialect: Dialect;
  /** auto_explain's plans, as the notices of the pool's session. */
  let plans: string[] = [];

  before(async () => {
    // One connection: the statement after them runs on the session that ran them.
    ({ dataSource, plans } = await explainedSession(db, ['auto_explain.log_settings = on']));
    dialect = createDialect(dataSource, resolveOptions({ workers: false }).tables);
  });
  after(() => dataSource?.destroy());

  it('the sweep, the instances list and the views naming each row’s owner run with jit = off; the session keeps its own setting', async () => {
    await dialect.instanceEndDead({ self: randomUUID(), unregisteredAfterMs: 15_000 });
    await dialect.instanceList();
    await dialect.adminClaimList({ component: 'outbox', limit: 10 });
    await dialect.blockedKeyList({ component: 'inbox', limit: 10 });
    const planOf = (marker: string) => {
      const found = plans.filter((plan) => plan.includes(marker));
      assert.equal(found.length, 1, `one plan with ${JSON.stringify(marker)} among ${plans.length}`);
      return found[0];
    };
    assert.match(planOf('DELETE FROM "queuebox_instances"'), /Settings: .*jit = 'off'/);
    assert.match(planOf('outbox_claims'), /Settings: .*jit = 'off'/);
    assert.match(planOf('AS lease_left'), /Settings: .*jit = 'off'/);
    assert.match(planOf(`AS reason`), /Settings: .*jit = 'off'/);
    // SET LOCAL ended with the statement's transaction: the session's next statement runs as the session says.
    plans.length = 0;
    await dataSource.query(`SELECT 'after' AS marker`);
    assert.doesNotMatch(planOf(`'after' AS marker`), /jit = 'off'/);
  });
});
