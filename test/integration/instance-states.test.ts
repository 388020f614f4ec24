import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import { PrometheusModule } from '@willsoto/nestjs-prometheus';
import { register } from 'prom-client';
import type { DataSource } from 'typeorm';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import type { InstanceState } from '../../lib/dialects/dialect-rows';
import { QueueBoxHealth } from '../../lib/health/queuebox-health';
import { QueueBoxInstance } from '../../lib/instance/queuebox.instance';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { QueueBoxPrometheusModule } from '../../lib/prometheus';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { HttpRecorder } from '../support/http-recorder';
import { startWorker, type WorkerProcess } from '../support/processes';

// What the operator is told about instances and the rows they hold (issue 34, item 4). An
// instance is alive, silent (it missed two heartbeats: its last one older than 2/3 of its
// deadAfterMs) or dead (older than its deadAfterMs), by the database clock, and the admin reads,
// health and the Prometheus gauge say the same. A head has an owner only while it is held (a live
// lease); a failing head waiting for its retry names its last claimer as such, never as an owner.

/** This app's own timer never beats during a test, and it runs no worker: it sweeps nobody, so dead rows stay listed. */
const QUIET = { heartbeatMs: 60_000, deadAfterMs: 180_000 };

/** The value of one series of the registry's text exposition; undefined when absent. */
async function series(name: string): Promise<number | undefined> {
  const line = (await register.metrics()).split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

const gauge = async (queuebox: string) =>
  Object.fromEntries(
    await Promise.all(
      (['alive', 'silent', 'dead'] as const).map(async (state) => [
        state,
        await series(`queuebox_instances{state="${state}",queuebox="${queuebox}"}`),
      ]),
    ),
  );

describeWithDatabase('instance states (alive, silent, dead) and the owners of blocked heads', (db) => {
  let t: TestApp;
  let admin: QueueBoxAdmin;
  let dataSource: DataSource;
  let self: string;

  before(async () => {
    register.clear();
    t = await createTestApp(
      db.url,
      { workers: false, instances: QUIET, outbox: { publisher: { publish: async () => undefined } } },
      { imports: [PrometheusModule.register({ defaultMetrics: { enabled: false } }), QueueBoxPrometheusModule] },
    );
    admin = t.get(QueueBoxAdmin);
    dataSource = t.app.get<DataSource>(getDataSourceToken());
    self = t.get(QueueBoxInstance).id;
  });
  after(async () => {
    await t?.app.close();
    register.clear();
  });

  /**
   * Writes instance rows as registration does, each with its deadAfterMs and a heartbeat `ageMs`
   * old by the database clock. Written again right before each read, so the time a read takes
   * cannot move a row across a boundary.
   */
  const writeInstances = async (rows: { id: string; deadAfterMs: number; ageMs: number }[]) => {
    for (const { id, deadAfterMs, ageMs } of rows) {
      await db.query(
        `INSERT INTO queuebox_instances (id, host, pid, data_source, version, dead_after_ms, heartbeat_at)
         VALUES ($1, 'replica', 4000, 'default', '0.1.0', $2, clock_timestamp() - make_interval(secs => $3::double precision / 1000))
         ON CONFLICT (id) DO UPDATE SET dead_after_ms = EXCLUDED.dead_after_ms, heartbeat_at = EXCLUDED.heartbeat_at`,
        [id, deadAfterMs, ageMs],
      );
    }
  };
  const statesOf = async () => new Map((await admin.instances()).map((r) => [r.id, r.state]));

  it('decides the state from heartbeat_at and the row’s own deadAfterMs: alive up to 2/3 of it, silent up to all of it, dead after; health and the gauge agree', async () => {
    const ids = {
      alive: 'a0000000-0000-4000-8000-000000000001',
      justSilent: 'a0000000-0000-4000-8000-000000000002',
      lateSilent: 'a0000000-0000-4000-8000-000000000003',
      dead: 'a0000000-0000-4000-8000-000000000004',
      patient: 'a0000000-0000-4000-8000-000000000005',
    };
    // deadAfterMs 15 s: silent after 10 s, dead after 15 s. The same 30 s silence is dead at 15 s, alive at 60 s.
    const rows = [
      { id: ids.alive, deadAfterMs: 15_000, ageMs: 9_000 },
      { id: ids.justSilent, deadAfterMs: 15_000, ageMs: 10_500 },
      { id: ids.lateSilent, deadAfterMs: 15_000, ageMs: 14_000 },
      { id: ids.dead, deadAfterMs: 15_000, ageMs: 30_000 },
      { id: ids.patient, deadAfterMs: 60_000, ageMs: 30_000 },
    ];
    const expected: Record<string, InstanceState> = {
      [self]: 'alive',
      [ids.alive]: 'alive',
      [ids.justSilent]: 'silent',
      [ids.lateSilent]: 'silent',
      [ids.dead]: 'dead',
      [ids.patient]: 'alive',
    };
    await writeInstances(rows);
    assert.deepEqual(Object.fromEntries(await statesOf()), expected);

    await writeInstances(rows);
    const report = await t.get(QueueBoxHealth).check({ maxLagMs: false, maxCycleAgeMs: false });
    assert.deepEqual(report.instances, { alive: 3, silent: 2, dead: 1 });
    assert.equal(report.instance.state, 'alive');
    assert.deepEqual(report.problems, [], 'other instances silent or dead are not this one’s problem');

    await writeInstances(rows);
    assert.deepEqual(await gauge('default'), { alive: 3, silent: 2, dead: 1 });
    await db.query('DELETE FROM queuebox_instances WHERE id <> $1', [self]);
    await new Promise((resolve) => setTimeout(resolve, 600)); // past the 0.5 s the scrapes share a read
    assert.deepEqual(await gauge('default'), { alive: 1, silent: 0, dead: 0 }, 'a state with no instance reads 0');
  });

  it('health is down while this instance is silent or dead in the table (its heartbeats do not land), and says so', async () => {
    const age = (ms: number) =>
      db.query(
        'UPDATE queuebox_instances SET heartbeat_at = clock_timestamp() - make_interval(secs => $2::double precision / 1000) WHERE id = $1',
        [self, ms],
      );
    const health = t.get(QueueBoxHealth);
    await age(130_000); // of 180 s: silent after 120 s
    const silent = await health.check({ maxLagMs: false, maxCycleAgeMs: false });
    assert.equal(silent.healthy, false);
    assert.equal(silent.instance.state, 'silent');
    assert.match(
      silent.problems.join('\n'),
      /last heartbeat landed 13\d(\.\d)? s ago by the database clock: the instances table shows it SILENT/,
    );
    await age(190_000);
    const dead = await health.check({ maxLagMs: false, maxCycleAgeMs: false });
    assert.equal(dead.instance.state, 'dead');
    assert.match(dead.problems.join('\n'), /shows it DEAD \(more than instances\.deadAfterMs, 180000 ms\): a live replica ends its leases/);
    assert.equal(
      (await health.check({ maxLagMs: false, maxCycleAgeMs: false, instances: false })).healthy,
      true,
      'instances: false skips it',
    );
    await t.get(QueueBoxInstance).beat();
    assert.equal((await health.check({ maxLagMs: false, maxCycleAgeMs: false })).instance.state, 'alive');
  });

  it('blocked heads and claims: an owner only while held (a live lease), in its state; a head nobody holds names only its last claimer', async () => {
    const alive = 'b0000000-0000-4000-8000-000000000001';
    const silent = 'b0000000-0000-4000-8000-000000000002';
    const dead = 'b0000000-0000-4000-8000-000000000003';
    const gone = 'b0000000-0000-4000-8000-000000000004'; // declared dead and deleted already
    const instances = [
      { id: alive, deadAfterMs: 60_000, ageMs: 0 },
      { id: silent, deadAfterMs: 60_000, ageMs: 45_000 },
      { id: dead, deadAfterMs: 60_000, ageMs: 90_000 },
    ];
    await writeInstances(instances);
    /**
     * A head of `key` claimed last by `by`, with a row of its key behind it, as the workers leave
     * it: `held` (processing, lease ends in an hour), `expired` (processing, lease ended an hour
     * ago), `failing` (its attempt failed: pending until its retry in 10 minutes, no claim).
     */
    const head = async (key: string, by: string, how: 'held' | 'expired' | 'failing') => {
      const claimed = how !== 'failing';
      await db.query(
        `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, last_error, available_at,
                                      claim_token, claimed_at, lease_expires_at, claimed_by)
         VALUES (gen_random_uuid(), 'billing', $1, '{}', $2, 1, $3, clock_timestamp() + interval '10 minutes',
                 CASE WHEN $4 THEN gen_random_uuid() END, clock_timestamp() - make_interval(secs => $7),
                 CASE WHEN $4 THEN clock_timestamp() + make_interval(secs => $5) END, $6),
                (gen_random_uuid(), 'billing', $1, '{}', 'pending', 0, NULL, clock_timestamp(), NULL, NULL, NULL, NULL)`,
        // A dead instance claimed its row before it stopped (an instance that renews lives).
        [
          key,
          claimed ? 'processing' : 'pending',
          claimed ? null : 'HTTP 503',
          claimed,
          how === 'held' ? 3600 : -3600,
          by,
          by === dead ? 100 : 20,
        ],
      );
    };
    await head('held-by-alive-01', alive, 'held');
    await head('held-by-silent-02', silent, 'held');
    await head('held-by-dead-03', dead, 'held');
    await head('held-by-gone-04', gone, 'held');
    await head('expired-of-alive-05', alive, 'expired');
    await head('failing-of-dead-06', dead, 'failing');
    await head('failing-of-gone-07', gone, 'failing');
    await head('failing-of-alive-08', alive, 'failing');

    await writeInstances(instances);
    const blocked = new Map((await admin.listBlockedKeys({ component: 'outbox' })).map((r) => [r.key, r]));
    const ownership = (key: string) => {
      const r = blocked.get(key);
      assert.ok(r, `${key} is listed`);
      return { owner: r.owner, ownerState: r.ownerState, lastClaimedBy: r.lastClaimedBy, held: r.heldSeconds !== null };
    };
    assert.deepEqual(ownership('held-by-alive-01'), { owner: alive, ownerState: 'alive', lastClaimedBy: alive, held: true });
    assert.deepEqual(ownership('held-by-silent-02'), { owner: silent, ownerState: 'silent', lastClaimedBy: silent, held: true });
    assert.deepEqual(ownership('held-by-dead-03'), { owner: dead, ownerState: 'dead', lastClaimedBy: dead, held: true });
    assert.deepEqual(ownership('held-by-gone-04'), { owner: gone, ownerState: 'dead', lastClaimedBy: gone, held: true });
    for (const key of ['expired-of-alive-05', 'failing-of-alive-08']) {
      assert.deepEqual(ownership(key), { owner: null, ownerState: null, lastClaimedBy: alive, held: false }, key);
    }
    assert.deepEqual(ownership('failing-of-dead-06'), { owner: null, ownerState: null, lastClaimedBy: dead, held: false });
    assert.deepEqual(ownership('failing-of-gone-07'), { owner: null, ownerState: null, lastClaimedBy: gone, held: false });

    await writeInstances(instances);
    const claims = new Map((await admin.listClaims({ component: 'outbox' })).map((r) => [r.key, r]));
    assert.deepEqual([...claims.keys()].sort(), [
      'expired-of-alive-05',
      'held-by-alive-01',
      'held-by-dead-03',
      'held-by-gone-04',
      'held-by-silent-02',
    ]);
    assert.deepEqual([...claims.values()].map((r) => [r.key, r.owner, r.ownerState, r.lastClaimedBy]).sort(), [
      ['expired-of-alive-05', null, null, alive],
      ['held-by-alive-01', alive, 'alive', alive],
      ['held-by-dead-03', dead, 'dead', dead],
      ['held-by-gone-04', gone, 'dead', gone],
      ['held-by-silent-02', silent, 'silent', silent],
    ]);
    await db.query(`DELETE FROM queuebox_outbox`);
    await db.query('DELETE FROM queuebox_instances WHERE id <> $1', [self]);
  });

  describe('a QueueBox process paused (SIGSTOP) and resumed', () => {
    const recorder = new HttpRecorder((request) => (request.path === '/held' ? 'hang' : 503));
    let worker: WorkerProcess | undefined;
    after(async () => {
      worker?.child.kill('SIGCONT');
      worker?.child.kill('SIGKILL');
      await worker?.exited;
      await recorder.stop();
    });

    it('reads alive, then silent, then dead, then alive again; it owns the head it holds in that state, and is only the last claimer of the head it failed', async () => {
      const url = await recorder.start();
      // Heartbeats every 300 ms, dead after 9 s: silent from 6 s (a window of 3 s, wide enough to
      // see on a loaded machine). A failed publish retries in 10 minutes.
      worker = await startWorker({
        dbUrl: db.url,
        publishUrl: url,
        name: 'paused',
        options: {
          workers: { outbox: true, relay: false, pull: false },
          outbox: { pollIntervalMs: 50, retry: { attempts: 5, backoff: { delay: '10m', jitter: false } } },
          instances: { heartbeatMs: 300, deadAfterMs: 9_000 },
        },
      });
      const [{ id }] = await db.query<{ id: string }>('SELECT id::text FROM queuebox_instances WHERE pid = $1', [worker.child.pid]);
      for (const [destination, key] of [
        ['held', 'k-held'],
        ['held', 'k-held'],
        ['fail', 'k-failed'],
        ['fail', 'k-failed'],
      ]) {
        await dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination, key, payload: {} }));
      }
      const blocked = async () => new Map((await admin.listBlockedKeys({ component: 'outbox' })).map((r) => [r.key, r]));
      await eventually(async () => {
        const now = await blocked();
        return now.get('k-held')?.owner === id && now.get('k-failed')?.state === 'pending' && now.get('k-failed')?.attempts === 1;
      }, 'the worker to hold k-held and to have failed k-failed once');

      /** One look at the worker: its state, the owner state of the head it holds, and the failed head's ownership. */
      const look = async () => {
        const [states, heads] = [await statesOf(), await blocked()];
        const failed = heads.get('k-failed');
        return {
          state: states.get(id),
          heldOwner: heads.get('k-held')?.owner === id ? heads.get('k-held')?.ownerState : 'not the owner',
          failed: [failed?.owner, failed?.ownerState, failed?.lastClaimedBy],
        };
      };
      assert.deepEqual(await look(), { state: 'alive', heldOwner: 'alive', failed: [null, null, id] });

      worker.child.kill('SIGSTOP');
      // The instances list and the blocked list are two statements, so near a boundary one can
      // read a state the other has not reached yet: each must go through the states in turn.
      const states: unknown[] = [];
      const heldOwnerStates: unknown[] = [];
      const failedOwnership = new Set<string>();
      const changed = (seen: unknown[], now: unknown) => {
        if (seen.at(-1) !== now) seen.push(now);
      };
      await eventually(
        async () => {
          const now = await look();
          changed(states, now.state);
          changed(heldOwnerStates, now.heldOwner);
          failedOwnership.add(JSON.stringify(now.failed));
          return now.state === 'dead' && now.heldOwner === 'dead';
        },
        'the paused worker to be dead by the database clock',
        30_000,
        50,
      );
      const inTurn = (seen: unknown[]) => ['alive', 'silent', 'dead'].slice(seen[0] === 'alive' ? 0 : 1);
      assert.deepEqual(states, inTurn(states), 'the instance: each state in turn');
      assert.deepEqual(heldOwnerStates, inTurn(heldOwnerStates), 'the owner of the head it holds: each state in turn');
      assert.deepEqual([...failedOwnership], [JSON.stringify([null, null, id])], 'the failed head has no owner in any of them');
      const report = await t.get(QueueBoxHealth).check({ maxLagMs: false, maxCycleAgeMs: false });
      assert.deepEqual([report.instances, report.instance.state, report.healthy], [{ alive: 1, silent: 0, dead: 1 }, 'alive', true]);
      assert.deepEqual(await gauge('default'), { alive: 1, silent: 0, dead: 1 });

      worker.child.kill('SIGCONT');
      await eventually(async () => (await look()).state === 'alive', 'the resumed worker to heartbeat again', 10_000, 50);
      assert.deepEqual(await look(), { state: 'alive', heldOwner: 'alive', failed: [null, null, id] });
    });
  });
});
