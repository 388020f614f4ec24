import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { after, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import { Client } from 'pg';
import type { DataSource } from 'typeorm';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { packageVersion } from '../../lib/common/package-version';
import { QUEUEBOX_DIALECT, QUEUEBOX_IDENTITY } from '../../lib/common/queuebox.constants';
import type { Dialect } from '../../lib/dialects/dialect';
import { instanceEndDeadSql } from '../../lib/dialects/postgres/instances.sql';
import { type QueueBoxEventMap, QueueBoxEvents } from '../../lib/events/queuebox.events';
import { QueueBoxHealth } from '../../lib/health/queuebox-health';
import { InboxService } from '../../lib/inbox/inbox.service';
import { QueueBoxInstance } from '../../lib/instance/queuebox.instance';
import { QueueBoxMetrics } from '../../lib/metrics/queuebox.metrics';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { type PullContext, PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { QueueBoxIdentity } from '../../lib/types/instance';
import type { InboxMessage } from '../../lib/types/messages';
import { createTestApp, type TestApp } from '../support/app';
import { claimsOf } from '../support/claims';
import { describeWithDatabase, eventually } from '../support/database';
import { gate, RecordingPublisher } from '../support/recording-publisher';

// Instances (migration 006): each QueueBox registers itself and heartbeats; a live replica ends the
// leases of one silent past its deadAfterMs, and what it held is claimed again at once instead of
// after its lease (300 s by default). Every app here is a real Nest app on its own connections.

/** Short heartbeats: a dead instance is found within about a second. */
const FAST = { heartbeatMs: 100, deadAfterMs: 1000 };
/** An instance whose own timer does not beat during a test (the test beats it by hand, or stops it). */
const QUIET = { heartbeatMs: 60_000, deadAfterMs: 180_000 };
const LONG_LEASE = 300_000;

/** What the "renewing" pull handler does with each message; set per test. */
let renewingBehaviour: (message: InboxMessage, context: PullContext) => Promise<void> = async () => undefined;
let renewingCalls = 0;

/** A pull handler whose lease (1.5 s) is renewed every half second while it runs. */
@Injectable()
class RenewingHandler {
  @PullHandler('renewing', { leaseMs: 1500 })
  async handle(message: InboxMessage, context: PullContext) {
    renewingCalls++;
    await renewingBehaviour(message, context);
  }
}

describeWithDatabase('instances: heartbeats, and a dead replica’s leases ended at once', (db) => {
  const apps: TestApp[] = [];
  const start = async (...args: Parameters<typeof createTestApp>) => {
    const t = await createTestApp(...args);
    apps.push(t);
    return t;
  };
  after(async () => {
    for (const t of apps) await t.app.close().catch(() => undefined);
  });

  /** Whether any app logged `fragment` at `level` (Nest's static loggers write to the app created last). */
  const logged = (level: string, fragment: string) => apps.some((t) => t.logger.has(level, fragment));

  /** Records `name` events of an app. */
  const recordEvents = <K extends keyof QueueBoxEventMap>(t: TestApp, name: K): QueueBoxEventMap[K][] => {
    const seen: QueueBoxEventMap[K][] = [];
    t.get(QueueBoxEvents).on(name, (event) => seen.push(event));
    return seen;
  };

  /** An instance row written by hand: `silentFor` ms since its last heartbeat. */
  const fakeInstance = async (id: string, silentForMs: number, deadAfterMs = 15_000) => {
    await db.query(
      `INSERT INTO queuebox_instances (id, host, pid, data_source, version, dead_after_ms, heartbeat_at)
       VALUES ($1, 'elsewhere', 999999, 'default', '0.0.1', $2, clock_timestamp() - make_interval(secs => $3::double precision / 1000))`,
      [id, deadAfterMs, silentForMs],
    );
  };

  /**
   * An outbox row claimed by `owner` `claimedAgo` ago (a minute: before a dead owner went silent),
   * never renewed, with a lease of five minutes, and `behind` pending rows of its key after it.
   */
  const heldOutboxRow = async (owner: string, key: string, behind = 0, claimedAgo = '1 minute') => {
    const [head] = await db.query<{ id: string; claim_token: string }>(
      `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, claim_token, claimed_at, lease_expires_at, claimed_by)
       VALUES (gen_random_uuid(), 'd', $1, '0', 'processing', 1, gen_random_uuid(), clock_timestamp() - $3::interval, clock_timestamp() + interval '5 minutes', $2)
       RETURNING id::text AS id, claim_token::text AS claim_token`,
      [key, owner, claimedAgo],
    );
    for (let n = 1; n <= behind; n++) {
      await db.query(`INSERT INTO queuebox_outbox (message_id, destination, "key", payload) VALUES (gen_random_uuid(), 'd', $1, $2)`, [
        key,
        String(n),
      ]);
    }
    return head;
  };

  const outboxRow = async (id: string) =>
    (
      await db.query<{ state: string; claim_token: string | null; attempts: number }>(
        'SELECT state, claim_token::text AS claim_token, attempts FROM queuebox_outbox WHERE id = $1',
        [id],
      )
    )[0];

  it('registers at start-up with host, pid, DataSource, version and deadAfterMs, heartbeats by the database clock, and claims name it', async () => {
    const t = await start(db.url, { workers: false, instances: FAST });
    const id = t.get(QueueBoxInstance).id;
    const row = async () =>
      (
        await db.query<{ host: string; pid: number; data_source: string; version: string; dead_after_ms: number; heartbeat_at: Date }>(
          'SELECT host, pid, data_source, version, dead_after_ms, heartbeat_at FROM queuebox_instances WHERE id = $1',
          [id],
        )
      )[0];
    const first = await row();
    assert.deepEqual(
      { ...first, heartbeat_at: undefined },
      {
        host: hostname(),
        pid: process.pid,
        data_source: 'default',
        version: packageVersion(),
        dead_after_ms: 1000,
        heartbeat_at: undefined,
      },
    );
    await eventually(async () => (await row()).heartbeat_at > first.heartbeat_at, 'a heartbeat after the registration', 5000);

    const dataSource = t.app.get<DataSource>(getDataSourceToken());
    await dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'd', payload: 1 }));
    const [claim] = await claimsOf(t).outbox.claim({ limit: 1, leaseMs: 60_000 });
    assert.deepEqual(await db.query('SELECT claimed_by FROM queuebox_outbox WHERE id = $1', [claim.id]), [{ claimed_by: id }]);
    const listed = (await t.get(QueueBoxAdmin).instances()).find((r) => r.id === id);
    assert.equal(listed?.state, 'alive');
    assert.deepEqual(listed?.claims, { outbox: 1, inbox: 0 });
    const [held] = await t.get(QueueBoxAdmin).listClaims({ component: 'outbox' });
    assert.deepEqual([held.owner, held.ownerState, held.lastClaimedBy], [id, 'alive', id]);
    await t.app.close();
    assert.deepEqual(await db.query('SELECT id FROM queuebox_instances WHERE id = $1', [id]), [], 'a clean shutdown deregisters');
    await db.query('TRUNCATE queuebox_outbox');
  });

  it('a live replica ends the leases of an instance silent past its deadAfterMs and claims its rows at once; a live instance’s are left alone', async () => {
    const dead = 'dead0000-0000-4000-8000-000000000001';
    const alive = 'a11ce000-0000-4000-8000-000000000001';
    await fakeInstance(dead, 60_000);
    await fakeInstance(alive, 0, 600_000);
    await heldOutboxRow(dead, 'k-dead', 2);
    const aliveHead = await heldOutboxRow(alive, 'k-alive');
    await db.query(
      `INSERT INTO queuebox_inbox (source, idempotency_key, payload, state, attempts, claim_token, claimed_at, lease_expires_at, claimed_by)
       VALUES ('nobody-consumes', 'i1', '0', 'processing', 1, gen_random_uuid(), clock_timestamp() - interval '1 minute', clock_timestamp() + interval '5 minutes', $1)`,
      [dead],
    );
    const publisher = new RecordingPublisher();
    const started = Date.now();
    const t = await start(db.url, {
      outbox: { publisher, pollIntervalMs: 50, claimTimeoutMs: LONG_LEASE },
      workers: { outbox: true, relay: false, pull: false },
      instances: FAST,
    });
    const deadEvents = recordEvents(t, 'queuebox:instance-dead');
    await eventually(
      async () => (await db.query(`SELECT 1 FROM queuebox_outbox WHERE "key" = 'k-dead' AND state <> 'sent'`)).length === 0,
      'the dead instance’s key to be published',
      10_000,
    );
    const tookMs = Date.now() - started;
    assert.ok(tookMs < 10_000, `taken over in ${tookMs} ms, long before the 5-minute lease`);
    assert.deepEqual(
      publisher.calls.map((c) => [c.message.key, c.message.payload, c.message.attempt]),
      [
        ['k-dead', 0, 2],
        ['k-dead', 1, 1],
        ['k-dead', 2, 1],
      ],
      'the head again (its second attempt), then the rows behind it, in order',
    );
    assert.deepEqual(await outboxRow(aliveHead.id), { state: 'processing', claim_token: aliveHead.claim_token, attempts: 1 });
    assert.deepEqual(await db.query('SELECT id FROM queuebox_instances WHERE id = $1', [dead]), []);
    assert.equal((await db.query('SELECT id FROM queuebox_instances WHERE id = $1', [alive])).length, 1);
    assert.deepEqual(await db.query(`SELECT state, lease_expires_at <= clock_timestamp() AS ended FROM queuebox_inbox`), [
      { state: 'processing', ended: true },
    ]);
    assert.equal(deadEvents.length, 1);
    assert.deepEqual(
      { ...deadEvents[0], lastHeartbeatAt: undefined },
      {
        id: dead,
        registered: true,
        host: 'elsewhere',
        pid: 999999,
        dataSource: 'default',
        lastHeartbeatAt: undefined,
        released: { outbox: 1, inbox: 1 },
      },
    );
    assert.ok(logged('warn', `QueueBox instance ${dead} (elsewhere, pid 999999) is dead`));
    const counters = t.get(QueueBoxMetrics).snapshot();
    assert.equal(counters.queuebox_instances_dead_total, 1, JSON.stringify(counters));
    assert.equal(counters['queuebox_claims_released_total{cause="instance-dead",table="outbox"}'], 1, JSON.stringify(counters));
    assert.equal(counters['queuebox_claims_released_total{cause="instance-dead",table="inbox"}'], 1, JSON.stringify(counters));
    const report = await t.get(QueueBoxHealth).check();
    assert.equal(report.instance.deadInstancesEnded, 1);
    assert.equal(report.instance.registered, true);
    await t.app.close();
    await db.query('TRUNCATE queuebox_outbox, queuebox_inbox, queuebox_instances');
  });

  it('replicas beating at the same moment end each dead instance once: one of them gets its claims, never both', async () => {
    const worker = () => ({
      outbox: { publisher: new RecordingPublisher(), pollIntervalMs: 50, claimTimeoutMs: LONG_LEASE },
      workers: { outbox: true, relay: false, pull: false },
      instances: QUIET, // their timers stay quiet: the test beats both at the same moment
    });
    const [a, b] = [await start(db.url, worker()), await start(db.url, worker())];
    const both = [recordEvents(a, 'queuebox:instance-dead'), recordEvents(b, 'queuebox:instance-dead')];
    const rounds = 15;
    for (let round = 0; round < rounds; round++) {
      const dead = `dead0000-0000-4000-8000-${String(round).padStart(12, '0')}`;
      await fakeInstance(dead, 60_000);
      for (let n = 0; n < 3; n++) await heldOutboxRow(dead, `k-${round}-${n}`);
      await Promise.all([a.get(QueueBoxInstance).sweep(), b.get(QueueBoxInstance).sweep()]);
    }
    const seen = [...both[0], ...both[1]];
    assert.equal(seen.length, rounds, `one instance-dead event per dead instance: ${both[0].length} + ${both[1].length}`);
    assert.equal(new Set(seen.map((e) => e.id)).size, rounds);
    assert.ok(
      seen.every((e) => e.released.outbox === 3),
      JSON.stringify(seen.map((e) => e.released)),
    );
    await eventually(
      async () => (await db.query(`SELECT 1 FROM queuebox_outbox WHERE state <> 'sent'`)).length === 0,
      'every released row to be published',
      10_000,
    );
    await a.app.close();
    await b.app.close();
    await db.query('TRUNCATE queuebox_outbox');
  });

  it('declared dead while it lives (a pause past deadAfterMs): its claims fail their fence, and its next heartbeat registers it again', async () => {
    const paused = await start(db.url, { workers: false, instances: QUIET });
    const pausedId = paused.get(QueueBoxInstance).id;
    const dataSource = paused.app.get<DataSource>(getDataSourceToken());
    await dataSource.transaction((manager) => paused.get(OutboxService).enqueue(manager, { destination: 'd', key: 'k', payload: 'p' }));
    const [claim] = await claimsOf(paused).outbox.claim({ limit: 1, leaseMs: LONG_LEASE });
    // Its heartbeats stopped an hour ago, as far as the database can tell, and so did its renewals.
    await db.query(`UPDATE queuebox_instances SET heartbeat_at = clock_timestamp() - interval '1 hour' WHERE id = $1`, [pausedId]);
    await db.query(`UPDATE queuebox_outbox SET claimed_at = clock_timestamp() - interval '1 hour' WHERE id = $1`, [claim.id]);

    const publisher = new RecordingPublisher();
    const survivor = await start(db.url, {
      outbox: { publisher, pollIntervalMs: 50, claimTimeoutMs: LONG_LEASE },
      workers: { outbox: true, relay: false, pull: false },
      instances: FAST,
    });
    await eventually(async () => (await outboxRow(claim.id)).state === 'sent', 'the survivor to publish the paused one’s row', 10_000);
    assert.deepEqual(
      publisher.calls.map((c) => c.message.attempt),
      [2],
    );
    assert.equal(await claimsOf(paused).lease.complete(claim), false, 'the paused owner’s fenced write finds its claim gone');

    await paused.get(QueueBoxInstance).beat();
    assert.equal(paused.get(QueueBoxInstance).status.declaredDead, 1);
    // Nest's static loggers write to the app created last: look in every app's log.
    assert.ok(logged('warn', `This QueueBox instance (${pausedId}) was declared dead by another replica`));
    assert.equal((await db.query('SELECT id FROM queuebox_instances WHERE id = $1', [pausedId])).length, 1, 'registered again');
    await survivor.app.close();
    await paused.app.close();
    await db.query('TRUNCATE queuebox_outbox');
  });

  it('claims left by an instance no longer registered (declared dead, it claimed before it registered again, then died) end after deadAfterMs; fresh ones do not', async () => {
    const gone = 'ab5e0000-0000-4000-8000-000000000001';
    const resuming = 'ab5e0000-0000-4000-8000-000000000002';
    await heldOutboxRow(gone, 'k-left', 1, '20 seconds');
    // Claimed a moment ago by an instance about to register again: not left behind (yet).
    const fresh = await heldOutboxRow(resuming, 'k-fresh', 0, '0 seconds');
    // Claimed long ago by an instance about to register again, but renewed a moment ago: kept.
    const renewed = await heldOutboxRow(resuming, 'k-renewed', 0, '20 seconds');
    await db.query('UPDATE queuebox_outbox SET renewed_at = clock_timestamp() WHERE id = $1', [renewed.id]);
    const publisher = new RecordingPublisher();
    const t = await start(db.url, {
      outbox: { publisher, pollIntervalMs: 50, claimTimeoutMs: LONG_LEASE },
      workers: { outbox: true, relay: false, pull: false },
      instances: { heartbeatMs: 5_000, deadAfterMs: 15_000 }, // the test beats by hand before the timer does
    });
    const deadEvents = recordEvents(t, 'queuebox:instance-dead');
    await t.get(QueueBoxInstance).sweep();
    await eventually(
      async () => (await db.query(`SELECT 1 FROM queuebox_outbox WHERE "key" = 'k-left' AND state <> 'sent'`)).length === 0,
      'the left-behind key to be published',
      10_000,
    );
    assert.deepEqual(
      deadEvents.map((e) => ({ ...e })),
      [
        {
          id: gone,
          registered: false,
          host: null,
          pid: null,
          dataSource: null,
          lastHeartbeatAt: null,
          released: { outbox: 1, inbox: 0 },
        },
      ],
    );
    assert.ok(logged('warn', `QueueBox instance ${gone} is no longer registered but still held claims`));
    assert.deepEqual(await outboxRow(fresh.id), { state: 'processing', claim_token: fresh.claim_token, attempts: 1 });
    assert.deepEqual(await outboxRow(renewed.id), { state: 'processing', claim_token: renewed.claim_token, attempts: 1 });
    const counters = t.get(QueueBoxMetrics).snapshot();
    assert.equal(counters.queuebox_instances_dead_total ?? 0, 0, 'counted when it was declared dead, not again');
    assert.equal(counters['queuebox_claims_released_total{cause="instance-dead",table="outbox"}'], 1, JSON.stringify(counters));
    await t.app.close();
    await db.query('TRUNCATE queuebox_outbox, queuebox_instances');
  });

  it('a sweep blocked behind an open transaction never delays the heartbeat: no live replica is declared dead', async () => {
    const dead = 'dead0000-0000-4000-8000-00000000b10c';
    await fakeInstance(dead, 60_000);
    const held = await heldOutboxRow(dead, 'k-blocked');
    // An application transaction holds the dead instance's claimed row: every sweep that ends its
    // lease waits for it (and a second replica's sweep waits for the first's delete of the instance).
    const blocker = new Client({ connectionString: db.url });
    await blocker.connect();
    await blocker.query('BEGIN');
    await blocker.query('SELECT 1 FROM queuebox_outbox WHERE id = $1 FOR UPDATE', [held.id]);
    const blockedAt = (await blocker.query<{ now: Date }>('SELECT clock_timestamp() AS now')).rows[0].now;
    const worker = () => ({
      outbox: { publisher: new RecordingPublisher(), pollIntervalMs: 50, claimTimeoutMs: LONG_LEASE },
      workers: { outbox: true, relay: false, pull: false },
      instances: FAST,
    });
    const replicas = [await start(db.url, worker()), await start(db.url, worker())];
    const ids = replicas.map((t) => t.get(QueueBoxInstance).id);
    const deadEvents = replicas.flatMap((t) => [recordEvents(t, 'queuebox:instance-dead')]);
    try {
      await eventually(
        async () =>
          (await db.query(`SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)).length >= 2,
        'both replicas’ sweeps to wait for the lock',
        5000,
      );
      // Twice deadAfterMs after the lock was taken, both replicas have heartbeaten since (by the database clock).
      await eventually(
        async () =>
          (
            await db.query(
              `SELECT 1 FROM queuebox_instances WHERE id = ANY($1::uuid[]) AND heartbeat_at > $2::timestamptz + interval '2 seconds'`,
              [ids, blockedAt],
            )
          ).length === 2,
        'the heartbeats of both replicas to advance while their sweeps wait',
        6000,
      );
      assert.ok(
        (await db.query(`SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)).length >= 1,
        'a sweep still waits',
      );
    } finally {
      await blocker.query('ROLLBACK');
      await blocker.end();
    }
    await eventually(async () => (await outboxRow(held.id)).state === 'sent', 'the dead instance’s row to be published', 10_000);
    // A few more heartbeats and sweeps after the block: still nobody live declared dead.
    const [{ now: releasedAt }] = await db.query<{ now: Date }>('SELECT clock_timestamp() AS now');
    await eventually(
      async () =>
        (
          await db.query(
            `SELECT 1 FROM queuebox_instances WHERE id = ANY($1::uuid[]) AND heartbeat_at > $2::timestamptz + interval '0.5 seconds'`,
            [ids, releasedAt],
          )
        ).length === 2,
      'heartbeats after the block',
      5000,
    );
    const declared = deadEvents.flat().map((e) => e.id);
    assert.deepEqual(declared, [dead], 'only the dead instance was declared dead');
    assert.deepEqual(
      replicas.map((t) => t.get(QueueBoxInstance).status.declaredDead),
      [0, 0],
    );
    for (const t of replicas) await t.app.close();
    await db.query('TRUNCATE queuebox_outbox');
  });

  it('an instance never declares itself dead: its own sweep leaves its row and its claims alone, however old its heartbeat looks', async () => {
    const t = await start(db.url, {
      outbox: { publisher: new RecordingPublisher(), pollIntervalMs: 50, claimTimeoutMs: LONG_LEASE },
      workers: { outbox: true, relay: false, pull: false },
      instances: QUIET,
    });
    const self = t.get(QueueBoxInstance).id;
    const own = await heldOutboxRow(self, 'k-own');
    // Its heartbeat late behind a lock, as far as the database can tell, and a claim of its own long ago.
    await db.query(`UPDATE queuebox_instances SET heartbeat_at = clock_timestamp() - interval '1 hour' WHERE id = $1`, [self]);
    await db.query(`UPDATE queuebox_outbox SET claimed_at = clock_timestamp() - interval '1 hour' WHERE id = $1`, [own.id]);
    const deadEvents = recordEvents(t, 'queuebox:instance-dead');
    await t.get(QueueBoxInstance).sweep();
    assert.deepEqual(deadEvents, []);
    assert.equal((await db.query('SELECT 1 FROM queuebox_instances WHERE id = $1', [self])).length, 1, 'still registered');
    assert.deepEqual(await outboxRow(own.id), { state: 'processing', claim_token: own.claim_token, attempts: 1 });
    await db.query(`UPDATE queuebox_outbox SET state = 'dead', lease_expires_at = NULL WHERE id = $1`, [own.id]);
    await t.app.close();
    await db.query('TRUNCATE queuebox_outbox');
  });

  it('a heartbeat that looks old (a forward step of the database clock) does not end a lease its owner renewed within deadAfterMs, nor declare the owner dead', async (test) => {
    const held = gate();
    renewingCalls = 0;
    renewingBehaviour = () => held.promise;
    const owner = await start(
      db.url,
      { workers: { outbox: false, relay: false, pull: true }, pull: { pollIntervalMs: 20 }, instances: FAST },
      { providers: [RenewingHandler] },
    );
    const ownerId = owner.get(QueueBoxInstance).id;
    // A failing assertion must not leave the handler (and its transaction) open for ever.
    test.after(held.open);
    await owner.get(InboxService).receive({ source: 'renewing', idempotencyKey: 'r1', payload: {} });
    await eventually(async () => renewingCalls === 1, 'the handler to run');
    // Claimed longer ago than deadAfterMs (1 s), renewed within it: the owner keeps its lease.
    await eventually(
      async () =>
        (
          await db.query(
            `SELECT 1 FROM queuebox_inbox WHERE claimed_at < clock_timestamp() - interval '1200 milliseconds'
               AND renewed_at > clock_timestamp() - interval '700 milliseconds'`,
          )
        ).length === 1,
      'a claim older than deadAfterMs, renewed within it',
      10_000,
    );
    const [before] = await db.query<{ claim_token: string }>(`SELECT claim_token::text AS claim_token FROM queuebox_inbox`);
    // The database clock steps an hour forward, as far as the owner's heartbeat can tell, and
    // another replica sweeps before the owner beats again (one transaction: no heartbeat between).
    const replica = new Client({ connectionString: db.url });
    await replica.connect();
    let ended: { id: string }[];
    try {
      await replica.query('BEGIN');
      await replica.query(`UPDATE queuebox_instances SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE id = $1`, [ownerId]);
      ended = (
        await replica.query<{ id: string }>(instanceEndDeadSql('"queuebox_instances"', '"queuebox_outbox"', '"queuebox_inbox"'), [
          1000,
          'ffffffff-0000-4000-8000-000000000001',
        ])
      ).rows;
      await replica.query('COMMIT');
    } finally {
      await replica.end();
    }
    assert.deepEqual(ended, [], 'no instance declared dead, no lease ended');
    assert.equal((await db.query('SELECT 1 FROM queuebox_instances WHERE id = $1', [ownerId])).length, 1, 'the owner is still registered');
    assert.deepEqual(
      await db.query(`SELECT state, claim_token::text AS claim_token, lease_expires_at > clock_timestamp() AS live FROM queuebox_inbox`),
      [{ state: 'processing', claim_token: before.claim_token, live: true }],
    );
    held.open();
    await eventually(
      async () => (await db.query(`SELECT 1 FROM queuebox_inbox WHERE state = 'processed'`)).length === 1,
      'the owner to complete the message',
    );
    assert.equal(renewingCalls, 1, 'handled once');
    assert.ok(!logged('error', 'Lost the claim'), 'no claim lost');
    assert.equal(owner.get(QueueBoxInstance).status.declaredDead, 0);
    await owner.app.close();
    await db.query('TRUNCATE queuebox_inbox');
  });

  it('registration never takes over a row of its id: it says whose it is', async () => {
    const holder = await start(db.url, { workers: false, instances: QUIET });
    const other = await start(db.url, { workers: false, instances: QUIET });
    const id = holder.get(QueueBoxInstance).id;
    const [before] = await db.query<{ heartbeat_at: Date; beats: string }>(
      'SELECT heartbeat_at, beats::text AS beats FROM queuebox_instances WHERE id = $1',
      [id],
    );
    const registration = await other.app
      .get<Dialect>(QUEUEBOX_DIALECT)
      .instanceRegister({ id, host: 'clone', pid: 1, dataSource: 'default', version: '0', deadAfterMs: 1000 });
    assert.equal(registration.registered, false);
    assert.ok(!registration.registered && registration.holder.host === hostname() && registration.holder.pid === process.pid);
    assert.deepEqual(
      await db.query<{ heartbeat_at: Date; beats: string }>(
        'SELECT heartbeat_at, beats::text AS beats FROM queuebox_instances WHERE id = $1',
        [id],
      ),
      [before],
      'the row is left as it was',
    );
    await holder.app.close();
    await other.app.close();
  });

  it('two live processes with one instance id (a clone): one of them finds out at a heartbeat and takes a new id, and the clean shutdown of the other leaves its claims alone', async (test) => {
    const replica = (publisher: RecordingPublisher) => ({
      outbox: { publisher, pollIntervalMs: 20, claimTimeoutMs: LONG_LEASE },
      workers: { outbox: true, relay: false, pull: false },
      instances: FAST,
    });
    const late = gate();
    const publishers = [new RecordingPublisher(() => late.promise), new RecordingPublisher(() => late.promise)];
    const [a, b] = [await start(db.url, replica(publishers[0])), await start(db.url, replica(publishers[1]))];
    test.after(late.open);
    const shared = a.get(QueueBoxInstance).id;
    // What a copy of A's memory would share: its id and the heartbeat count it last saw.
    type Beats = { beats: { seen: number; inDoubt: number } };
    (b.get(QueueBoxInstance) as unknown as Beats).beats = { ...(a.get(QueueBoxInstance) as unknown as Beats).beats };
    b.app.get<QueueBoxIdentity>(QUEUEBOX_IDENTITY).id = shared;
    await eventually(
      async () => logged('warn', `Another live process heartbeats as QueueBox instance ${shared}`),
      'one of them to find out',
      5000,
    );
    const ids = [a.get(QueueBoxInstance).id, b.get(QueueBoxInstance).id];
    assert.equal(ids.filter((id) => id === shared).length, 1, `one keeps the id, the other takes a new one: ${ids}`);
    const [keeper, mover] = ids[0] === shared ? [a, b] : [b, a];
    const moverId = mover.get(QueueBoxInstance).id;
    const beating = async (id: string) =>
      (
        await db.query(
          `SELECT 1 FROM queuebox_instances WHERE id = $1 AND heartbeat_at > clock_timestamp() - interval '500 milliseconds'`,
          [id],
        )
      ).length === 1;
    await eventually(async () => (await beating(shared)) && (await beating(moverId)), 'both rows to heartbeat');

    // The one that moved claims a message; the other shuts down cleanly meanwhile.
    await keeper.get(OutboxPoller).stop();
    const moverPublisher = publishers[mover === a ? 0 : 1];
    const dataSource = a.app.get<DataSource>(getDataSourceToken());
    const { id } = await dataSource.transaction((manager) => a.get(OutboxService).enqueue(manager, { destination: 'd', payload: 'mine' }));
    await moverPublisher.waitForCalls(1);
    const [held] = await db.query<{ claimed_by: string; claim_token: string }>(
      'SELECT claimed_by::text AS claimed_by, claim_token::text AS claim_token FROM queuebox_outbox WHERE id = $1',
      [id],
    );
    assert.equal(held.claimed_by, moverId, 'claimed under its new id');
    await keeper.app.close();
    assert.deepEqual(
      await db.query(`SELECT state, claim_token::text AS claim_token FROM queuebox_outbox WHERE id = $1`, [id]),
      [{ state: 'processing', claim_token: held.claim_token }],
      'the other’s clean shutdown released nothing of it',
    );
    late.open();
    await eventually(async () => (await outboxRow(id)).state === 'sent', 'the mover to mark it sent');
    assert.equal(publishers[0].calls.length + publishers[1].calls.length, 1, 'published once');
    assert.ok(!logged('error', 'Lost the claim'), 'no claim lost');
    await mover.app.close();
    await db.query('TRUNCATE queuebox_outbox, queuebox_instances');
  });

  it('health goes down while heartbeats fail for deadAfterMs, and up again once they work', async () => {
    const t = await start(db.url, { workers: false, instances: FAST });
    const health = t.get(QueueBoxHealth);
    assert.equal((await health.check({ maxLagMs: false })).healthy, true);
    // The heartbeat's table out of reach: every beat fails as it would with the database gone.
    await db.query('ALTER TABLE queuebox_instances RENAME TO queuebox_instances_away');
    try {
      await eventually(
        async () => (await health.check({ maxLagMs: false, database: false })).problems.some((p) => p.includes('heartbeats have failed')),
        'health to report the failing heartbeats',
        5000,
      );
      assert.ok(logged('error', 'A QueueBox heartbeat failed'));
    } finally {
      await db.query('ALTER TABLE queuebox_instances_away RENAME TO queuebox_instances');
    }
    await eventually(async () => (await health.check({ maxLagMs: false })).healthy, 'health to be up again', 5000);
    assert.ok(logged('log', 'QueueBox heartbeats work again'));
    await t.app.close();
  });
});
