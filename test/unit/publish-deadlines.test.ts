import assert from 'node:assert/strict';
import { describe, it, type TestContext } from 'node:test';
import { type PublishCall, PublishDeadlines } from '../../lib/outbox/publish-call';

// The one timer behind every publish's timeout: publishes time out in start order, each once, a
// publish that ended is never timed out, and at most one timer runs (none while nothing is in flight).
// On mocked time (node:test's mock timers, performance.now read from the mocked clock): no real
// timer runs, so a loaded machine cannot move a deadline past an assertion.

/** A stand-in for a PublishCall: the fields the deadline list uses, and what timed it out. */
function call(name: string, timedOut: string[], onTimeout?: () => void): PublishCall {
  const c = {
    name,
    deadline: 0,
    prev: undefined,
    next: undefined,
    timedOut(reason: unknown) {
      timedOut.push(`${name}:${String(reason)}`);
      deadlines().remove(c as unknown as PublishCall);
      onTimeout?.();
    },
  };
  return c as unknown as PublishCall;
}

let current: PublishDeadlines;
const deadlines = () => current;
const timerOf = (d: PublishDeadlines) => (d as unknown as { timer?: NodeJS.Timeout }).timer;

/**
 * Mocks setTimeout and the clocks PublishDeadlines reads (performance.now, which node:test's mock
 * timers leave alone, follows the mocked Date.now), from 0 ms. Returns the timers armed and
 * neither fired nor cleared yet.
 */
function mockedTime(t: TestContext): Set<unknown> {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 0 });
  t.mock.method(performance, 'now', () => Date.now());
  const live = new Set<unknown>();
  const { setTimeout: set, clearTimeout: clear } = globalThis;
  t.mock.method(globalThis, 'setTimeout', (fn: () => void, ms: number) => {
    const timer = set(() => {
      live.delete(timer);
      fn();
    }, ms);
    live.add(timer);
    return timer;
  });
  t.mock.method(globalThis, 'clearTimeout', (timer: NodeJS.Timeout) => {
    live.delete(timer);
    clear(timer);
  });
  return live;
}

describe('PublishDeadlines', () => {
  it('times publishes out in start order, once each, never one that ended, and leaves no timer when none is in flight', (t) => {
    const live = mockedTime(t);
    const timedOut: string[] = [];
    current = new PublishDeadlines(40, () => 'timeout');
    const [a, b, c] = ['a', 'b', 'c'].map((name) => call(name, timedOut));
    current.add(a); // deadline 40
    t.mock.timers.tick(10);
    current.add(b); // deadline 50
    current.add(c); // deadline 50
    current.remove(b); // b ended in time
    t.mock.timers.tick(29);
    assert.deepEqual(timedOut, [], 'nothing before the first deadline (39 ms)');
    t.mock.timers.tick(1);
    assert.deepEqual(timedOut, ['a:timeout'], 'a at its deadline (40 ms)');
    t.mock.timers.tick(9);
    assert.deepEqual(timedOut, ['a:timeout'], 'c not before its deadline (49 ms)');
    t.mock.timers.tick(1);
    assert.deepEqual(timedOut, ['a:timeout', 'c:timeout'], 'c at its deadline (50 ms); b, which ended, never');
    assert.equal(timerOf(current), undefined, 'no timer once the list is empty');
    assert.equal(live.size, 0);
    current.add(call('d', timedOut));
    assert.equal(live.size, 1, 'one timer for the publish in flight');
    current.remove((current as unknown as { head: PublishCall }).head);
    assert.equal(timerOf(current), undefined, 'the timer stops when the last publish ends');
    assert.equal(live.size, 0);
    t.mock.timers.tick(60);
    assert.deepEqual(timedOut, ['a:timeout', 'c:timeout']);
  });

  it('a publish started while timeouts are handled (its slot freed by one) gets its own deadline, with one timer', (t) => {
    const live = mockedTime(t);
    const timedOut: string[] = [];
    current = new PublishDeadlines(30, () => 'timeout');
    const first = call('first', timedOut, () => current.add(call('next', timedOut))); // next: deadline 60
    current.add(first); // deadline 30
    t.mock.timers.tick(30);
    assert.deepEqual(timedOut, ['first:timeout']);
    assert.ok(timerOf(current), 'a timer for the publish started meanwhile');
    assert.equal(live.size, 1, 'one timer, not one more per publish started while timing out');
    t.mock.timers.tick(29);
    assert.deepEqual(timedOut, ['first:timeout'], 'next not before its own deadline');
    t.mock.timers.tick(1);
    assert.deepEqual(timedOut, ['first:timeout', 'next:timeout']);
    assert.equal(timerOf(current), undefined);
    assert.equal(live.size, 0);
  });
});
