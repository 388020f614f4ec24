import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  type CheckInput,
  duplicatesCheck,
  explanationOf,
  lostCheck,
  orderCheck,
  outOfOrderCommits,
  pausedCheck,
  poisonCheck,
  recoveryCheck,
  shutdownCheck,
  stuckCheck,
} from '../../lib/cli/verify/verify.checks';
import { resolveVerifyOptions, type VerifyPath } from '../../lib/cli/verify/verify.options';
import { MessagePlan } from '../../lib/cli/verify/verify.producer';
import type { Delivery, FaultRecord, PausedName, ProducedMessage } from '../../lib/cli/verify/verify.records';
import { recoveryBoundMs } from '../../lib/cli/verify/verify.runner';

// The checks of `queuebox verify` on records made by hand: each passes on what a working QueueBox
// leaves, and fails, naming the message, on what a broken one would. (The runs themselves, under
// real faults, are test/e2e/verify.test.ts and test/chaos/verify-defects.test.ts.)

const LEASE = 3000;

function produced(name: string, p: Partial<ProducedMessage> & { started: number; committed: number }): ProducedMessage {
  const [series] = name.split('/');
  const path = series.split('-')[0] as VerifyPath;
  return { name, path, key: series.endsWith('none') ? null : series, poison: false, rowId: name, ...p };
}

let seq = 0;
function delivered(name: string, p: Partial<Delivery> = {}): Delivery {
  seq++;
  const [series] = name.split('/');
  return {
    seq,
    name,
    path: series.split('-')[0] as VerifyPath,
    key: series.endsWith('none') ? null : series,
    messageId: `id-${name}`,
    worker: 'w1',
    attempt: 1,
    sentAt: 1_000 + seq * 10,
    receivedAt: 1_000 + seq * 10,
    ...p,
  };
}

function input(p: Partial<CheckInput>): CheckInput {
  return {
    produced: [],
    deliveries: [],
    faults: [],
    states: new Map(),
    leftovers: [],
    drain: { drained: true, ms: 1200, boundMs: 40_000 },
    scenarios: ['kill', 'pause', 'sessions', 'shutdown', 'admin-pause', 'poison'],
    leaseMs: LEASE,
    maxAttempts: 5,
    recoveryBoundMs: 10_000,
    shutdownBoundMs: 11_000,
    ...p,
  };
}

const fault = (kind: FaultRecord['kind'], worker: string, at: number, p: Partial<FaultRecord> = {}): FaultRecord => ({
  kind,
  worker,
  at,
  endedAt: at,
  held: [],
  ...p,
});

describe('verify checks: lost', () => {
  it('passes when every message but the poison ones was delivered, and names each one that was not, with its row', () => {
    const messages = [
      produced('outbox-0/0', { started: 1, committed: 2 }),
      produced('pull-0/0', { started: 3, committed: 4 }),
      produced('pull-0/1', { started: 5, committed: 6, poison: true }),
    ];
    assert.equal(lostCheck(input({ produced: messages, deliveries: [delivered('outbox-0/0'), delivered('pull-0/0')] })).status, 'PASS');
    const lost = lostCheck(
      input({
        produced: messages,
        deliveries: [delivered('outbox-0/0')],
        states: new Map([['pull-0/0', { state: 'dead', attempts: 6, lastError: 'lease expired on attempt 5 of 5' }]]),
      }),
    );
    assert.equal(lost.status, 'FAIL');
    assert.deepEqual(lost.failures, [
      'pull-0/0 was never delivered; its inbox row is dead after 6 attempts (lease expired on attempt 5 of 5)',
    ]);
    assert.equal(lost.figure, '1 of 2 messages lost (never delivered)');
  });
});

describe('verify checks: duplicates', () => {
  const copies = (worker: string) => [
    delivered('outbox-0/0', { worker: 'w1', sentAt: 5_000 }),
    delivered('outbox-0/0', { worker, sentAt: 9_000 }),
  ];

  it('a redelivery is explained by a kill, pause, ended session, shutdown or crash of a worker that delivered it, within a lease of its copies', () => {
    for (const kind of ['kill', 'pause', 'sessions', 'shutdown', 'crash'] as const) {
      const check = duplicatesCheck(input({ deliveries: copies('w2'), faults: [fault(kind, 'w1', 6_000)] }));
      assert.equal(check.status, 'PASS', kind);
      assert.match(check.figure, new RegExp(`1 redelivery, 1 explained \\(${kind} 1\\), 0 unexplained`));
    }
    // A pause that began before the first copy was sent and lasted past it.
    assert.equal(
      duplicatesCheck(input({ deliveries: copies('w2'), faults: [fault('pause', 'w1', 4_000, { endedAt: 8_500 })] })).status,
      'PASS',
    );
  });

  it('fails on a redelivery with no fault, a fault of another worker, or one long before', () => {
    const none = duplicatesCheck(input({ deliveries: copies('w2') }));
    assert.equal(none.status, 'FAIL');
    assert.deepEqual(none.failures, [
      'outbox-0/0 was delivered 2 times (by w1, w2) with no kill, pause, ended session or shutdown of those workers to explain it',
    ]);
    assert.equal(duplicatesCheck(input({ deliveries: copies('w2'), faults: [fault('kill', 'w3', 6_000)] })).status, 'FAIL');
    assert.equal(duplicatesCheck(input({ deliveries: copies('w2'), faults: [fault('kill', 'w1', 5_000 - LEASE - 1)] })).status, 'FAIL');
  });

  it('a message that reached the outbox under two message ids fails whatever happened: handled twice (pull) or forwarded twice (relay)', () => {
    const faults = [fault('pause', 'w1', 5_500, { endedAt: 9_500 })];
    const pull = duplicatesCheck(
      input({ deliveries: [delivered('pull-1/3', { messageId: 'a' }), delivered('pull-1/3', { messageId: 'b', worker: 'w2' })], faults }),
    );
    assert.equal(pull.status, 'FAIL');
    assert.deepEqual(pull.failures, [
      "pull-1/3 was handled 2 times: its pull handler's transaction committed 2 times (a lost claim must roll it back: I3)",
    ]);
    const relay = duplicatesCheck(
      input({ deliveries: [delivered('relay-1/3', { messageId: 'a' }), delivered('relay-1/3', { messageId: 'b' })], faults }),
    );
    assert.deepEqual(relay.failures, ['relay-1/3 was forwarded 2 times by the relay (2 outbox rows for one inbox message: I6)']);
  });
});

describe('verify checks: order', () => {
  const a = produced('outbox-0/0', { started: 1, committed: 2 });
  const b = produced('outbox-0/1', { started: 3, committed: 4 });

  it('fails when a message was first delivered before one of its key that had committed before it was produced', () => {
    const check = orderCheck(input({ produced: [a, b], deliveries: [delivered('outbox-0/1'), delivered('outbox-0/0')] }));
    assert.equal(check.status, 'FAIL');
    assert.deepEqual(check.failures, [
      'outbox-0/1 was first delivered before outbox-0/0, which had committed before outbox-0/1 was produced (I4)',
    ]);
  });

  it('passes on first deliveries in commit order, whatever the redeliveries after them', () => {
    const check = orderCheck(
      input({
        produced: [a, b],
        deliveries: [delivered('outbox-0/0'), delivered('outbox-0/1'), delivered('outbox-0/0', { worker: 'w2' })],
      }),
    );
    assert.equal(check.status, 'PASS');
    assert.equal(check.figure, '0 of 1 pair of one key out of order (first deliveries, 1 key)');
  });

  it('leaves alone two messages whose transactions overlapped, messages of other keys or without one, and the poison and the lost', () => {
    const overlapping = [produced('relay-0/0', { started: 1, committed: 4 }), produced('relay-0/1', { started: 2, committed: 3 })];
    assert.equal(orderCheck(input({ produced: overlapping, deliveries: [delivered('relay-0/1'), delivered('relay-0/0')] })).status, 'PASS');
    const others = [produced('outbox-0/0', { started: 1, committed: 2 }), produced('outbox-1/0', { started: 3, committed: 4 })];
    assert.equal(orderCheck(input({ produced: others, deliveries: [delivered('outbox-1/0'), delivered('outbox-0/0')] })).status, 'PASS');
    const unkeyed = [produced('outbox-none/0', { started: 1, committed: 2 }), produced('outbox-none/1', { started: 3, committed: 4 })];
    assert.equal(
      orderCheck(input({ produced: unkeyed, deliveries: [delivered('outbox-none/1'), delivered('outbox-none/0')] })).status,
      'PASS',
    );
    const poisoned = [{ ...a, poison: true }, b];
    assert.equal(orderCheck(input({ produced: poisoned, deliveries: [delivered('outbox-0/1')] })).status, 'PASS');
  });

  it('finds the violation behind the latest first delivery among all that committed earlier', () => {
    const messages = [0, 1, 2, 3].map((n) => produced(`batch-2/${n}`, { started: 10 * n + 1, committed: 10 * n + 2 }));
    const check = orderCheck(
      input({ produced: messages, deliveries: ['batch-2/0', 'batch-2/2', 'batch-2/1', 'batch-2/3'].map((name) => delivered(name)) }),
    );
    assert.deepEqual(check.failures, [
      'batch-2/2 was first delivered before batch-2/1, which had committed before batch-2/2 was produced (I4)',
    ]);
  });
});

describe('verify checks: stuck, poison, recovery, shutdown', () => {
  it('stuck fails on rows left pending or processing after the drain, naming those no live instance holds', () => {
    assert.equal(stuckCheck(input({})).status, 'PASS');
    const check = stuckCheck(
      input({
        drain: { drained: false, ms: 40_000, boundMs: 40_000 },
        leftovers: [{ component: 'inbox', name: 'verify.pull', pending: 3, processing: 2, ownerless: 2 }],
      }),
    );
    assert.equal(check.status, 'FAIL');
    assert.deepEqual(check.failures, ['inbox "verify.pull": 3 pending, 2 processing (2 with no live owner) after the drain']);
  });

  it('poison passes when each poison message is dead within maxAttempts (+1: the claim that found its last lease expired), never delivered', () => {
    const poison = produced('pull-0/2', { started: 1, committed: 2, poison: true });
    const dead = (attempts: number) => new Map([['pull-0/2', { state: 'dead', attempts, lastError: 'poison' }]]);
    assert.equal(poisonCheck(input({ produced: [poison], states: dead(5) })).status, 'PASS');
    assert.equal(poisonCheck(input({ produced: [poison], states: dead(6) })).status, 'PASS');
    assert.equal(poisonCheck(input({ produced: [poison], states: dead(7) })).status, 'FAIL');
    assert.deepEqual(
      poisonCheck(input({ produced: [poison], states: new Map([['pull-0/2', { state: 'pending', attempts: 3, lastError: null }]]) }))
        .failures,
      ['poison message pull-0/2 is pending after 3 attempts'],
    );
    assert.deepEqual(poisonCheck(input({ produced: [poison], states: dead(5), deliveries: [delivered('pull-0/2')] })).failures, [
      'poison message pull-0/2 was delivered',
    ]);
    assert.equal(poisonCheck(input({ produced: [poison], scenarios: ['kill'] })).status, 'SKIP');
  });

  it('recovery measures, per kill, the time until each key the killed worker held was delivered again', () => {
    const held = [{ component: 'outbox' as const, name: 'verify.outbox', key: 'outbox-1', messageId: 'm', idempotencyKey: null }];
    const kill = fault('kill', 'w2', 10_000, { held });
    const later = (ms: number) => delivered('outbox-1/4', { receivedAt: 10_000 + ms });
    const quick = recoveryCheck(input({ faults: [kill], deliveries: [later(3_500)] }));
    assert.equal(quick.status, 'PASS');
    assert.equal(
      quick.figure,
      'after 1 kill, the 1 claim the killed workers held moved again within 3.5 s (slowest: outbox-1) (bound 10.0 s)',
    );
    assert.deepEqual(recoveryCheck(input({ faults: [kill], deliveries: [later(12_000)] })).failures, [
      'key outbox-1, held by w2 when it was killed, was delivered again 12.0 s later (bound 10.0 s)',
    ]);
    assert.deepEqual(recoveryCheck(input({ faults: [kill], deliveries: [delivered('outbox-1/4', { receivedAt: 9_000 })] })).failures, [
      'key outbox-1, held by w2 when it was killed, was never delivered again',
    ]);
    assert.equal(recoveryCheck(input({ scenarios: ['pause'] })).status, 'SKIP');
    // Killed while an admin pause held its destination: the time counts from the resume (at 17 s).
    const paused: PausedName = { component: 'outbox', name: 'verify.outbox', heldKeys: [], claimedKeys: [], watchedMs: 7_000 };
    const adminPause = fault('admin-pause', '', 8_000, { endedAt: 17_000, paused: [paused] });
    const afterResume = recoveryCheck(input({ faults: [adminPause, kill], deliveries: [later(12_000)] }));
    assert.deepEqual([afterResume.status, afterResume.figure.match(/within ([\d.]+) s/)?.[1]], ['PASS', '5.0']);
    const otherName = fault('admin-pause', '', 8_000, { endedAt: 17_000, paused: [{ ...paused, name: 'verify.relay' }] });
    assert.equal(recoveryCheck(input({ faults: [otherName, kill], deliveries: [later(12_000)] })).status, 'FAIL', 'another name paused');
  });

  it('shutdown fails when a graceful shutdown overran its bound or left rows held by its instance', () => {
    const stop = (p: Partial<FaultRecord>) => fault('shutdown', 'w3', 1_000, { endedAt: 1_900, exitedInTime: true, leftHeld: 0, ...p });
    assert.equal(shutdownCheck(input({ faults: [stop({})] })).status, 'PASS');
    assert.deepEqual(shutdownCheck(input({ faults: [stop({ leftHeld: 2 })] })).failures, [
      'graceful shutdown of w3 left 2 rows held under a live lease of its instance (its deregistration must end them: I9)',
    ]);
    assert.deepEqual(shutdownCheck(input({ faults: [stop({ exitedInTime: false })] })).failures, [
      'graceful shutdown of w3 did not end within 11.0 s: it was killed',
    ]);
  });
});

describe('verify checks: paused', () => {
  const adminPause = (paused: PausedName[]) => fault('admin-pause', '', 2_000, { endedAt: 6_500, paused });
  const name = (component: 'outbox' | 'inbox', claimedKeys: (string | null)[]): PausedName => ({
    component,
    name: component === 'outbox' ? 'verify.outbox' : 'verify.pull',
    heldKeys: component === 'inbox' ? ['pull-1'] : [],
    claimedKeys,
    watchedMs: 3_400,
  });

  it('passes when nothing was claimed while paused, and fails naming each destination or source whose rows were', () => {
    const clean = pausedCheck(input({ faults: [adminPause([name('outbox', []), name('inbox', [])])] }));
    assert.equal(clean.status, 'PASS');
    assert.equal(clean.figure, '1 admin pause of 2 destinations or sources, watched 3.4 s: 0 rows claimed while paused');
    const broken = pausedCheck(input({ faults: [adminPause([name('outbox', ['outbox-2', null]), name('inbox', ['pull-3'])])] }));
    assert.equal(broken.status, 'FAIL');
    assert.deepEqual(broken.failures, [
      'destination "verify.outbox" was paused, yet 2 rows of it were claimed (keys outbox-2, none)',
      'source "verify.pull" was paused, yet 1 row of it was claimed (keys pull-3)',
    ]);
    assert.equal(pausedCheck(input({ scenarios: ['kill'] })).status, 'SKIP');
  });

  it('an admin pause explains no duplicate: it names no worker', () => {
    const copies = [delivered('outbox-1/0', { sentAt: 1_050 }), delivered('outbox-1/0', { sentAt: 1_080 })];
    assert.equal(explanationOf(copies, [fault('admin-pause', '', 1_000, { endedAt: 1_100 })], LEASE), undefined);
  });
});

describe('verify: what the producers write', () => {
  it('counts pairs of one key committed out of production order', () => {
    const messages = [
      produced('outbox-0/0', { started: 1, committed: 5 }),
      produced('outbox-0/1', { started: 2, committed: 3 }),
      produced('outbox-0/2', { started: 4, committed: 6 }),
      produced('outbox-1/0', { started: 7, committed: 8 }),
    ];
    assert.equal(outOfOrderCommits(messages), 1);
  });

  it('plans bursts of one key over the four paths, poison on each path (with the poison scenario), flaky and slow ones', () => {
    const plan = new MessagePlan({ keys: 2, scenarios: ['poison'], slowPercent: 10, slowMs: 1500, handlerMs: 3600 });
    const messages = Array.from({ length: 400 }, (_, i) => plan.message(i));
    assert.deepEqual(
      messages.slice(0, 6).map((m) => m.payload.name),
      ['outbox-0/0', 'outbox-0/1', 'outbox-0/2', 'relay-0/0', 'relay-0/1', 'relay-0/2'],
    );
    for (const path of ['outbox', 'relay', 'pull', 'batch']) {
      assert.ok(
        messages.some((m) => m.path === path && m.payload.poison),
        `a poison message on ${path}`,
      );
    }
    assert.ok(
      messages.some((m) => m.path === 'outbox' && m.key === null),
      'outbox messages without a key',
    );
    const slow = messages.filter((m) => m.payload.slowMs === 1500).length;
    assert.ok(slow > 30 && slow <= 40, `slow: 10% of the messages, poison ones left out (${slow})`);
    assert.ok(messages.filter((m) => m.payload.handlerMs === 3600).every((m) => m.path === 'pull'));
    assert.ok(messages.some((m) => m.payload.flaky));
    const none = new MessagePlan({ keys: 2, scenarios: [], slowPercent: 0, slowMs: 1500, handlerMs: 3600 });
    assert.ok(Array.from({ length: 400 }, (_, i) => none.message(i)).every((m) => !m.payload.poison && !m.payload.slowMs));
  });
});

describe('verify: options', () => {
  it('fills in the defaults, and keeps a run minutes long whatever the lease', () => {
    const defaults = resolveVerifyOptions({ url: 'postgres://db/x' }, {});
    assert.deepEqual(
      [defaults.seconds, defaults.rate, defaults.workers, defaults.leaseMs, defaults.slowMs, defaults.handlerMs, defaults.publishTimeoutMs],
      [30, 40, 3, 3000, 1500, 3600, 2250],
    );
    assert.deepEqual([defaults.shutdownTimeoutMs, defaults.pauseMs], [1000, 4500]);
    assert.deepEqual(defaults.scenarios, ['admin-pause', 'kill', 'pause', 'sessions', 'shutdown', 'poison']);
    assert.equal(recoveryBoundMs(defaults), 3600 + 2 * 3600 + 5000);
    // A production lease: slow steps stay 2 s, the pause outlasts the instance's dead-after, not the lease.
    const long = resolveVerifyOptions({ url: 'postgres://db/x', leaseMs: 300_000, deadAfterMs: 15_000, heartbeatMs: 3000 }, {});
    assert.deepEqual([long.slowMs, long.handlerMs, long.shutdownTimeoutMs, long.pauseMs], [2000, 2000, 1000, 31_500]);
    assert.equal(recoveryBoundMs(long), 21_000 + 2 * 4000 + 5000);
  });

  it('refuses what cannot be run, naming the option; the self-test defect comes from the environment only', () => {
    assert.throws(() => resolveVerifyOptions({ url: '' }, {}), { name: 'QueueBoxConfigError', option: 'url' });
    assert.throws(() => resolveVerifyOptions({ url: 'x', seconds: 2 }, {}), { option: 'seconds', message: /from 5 to 86400; got 2/ });
    assert.throws(() => resolveVerifyOptions({ url: 'x', scenarios: ['kill', 'meteor' as 'kill'] }, {}), { option: 'scenarios' });
    assert.throws(() => resolveVerifyOptions({ url: 'x', heartbeatMs: 3000, deadAfterMs: 5000 }, {}), { option: 'deadAfterMs' });
    assert.throws(() => resolveVerifyOptions({ url: 'x', prefix: 'Verify' }, {}), { option: 'prefix' });
    assert.equal(resolveVerifyOptions({ url: 'x' }, {}).defect, undefined);
    assert.equal(resolveVerifyOptions({ url: 'x' }, { QUEUEBOX_VERIFY_DEFECT: 'fence-off' }).defect, 'fence-off');
    assert.throws(() => resolveVerifyOptions({ url: 'x' }, { QUEUEBOX_VERIFY_DEFECT: 'fence' }), { option: 'QUEUEBOX_VERIFY_DEFECT' });
  });
});
