import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type PublishCall, PublishDeadlines } from '../../lib/outbox/publish-call';

// The one timer behind every publish's timeout: publishes time out in start order, each once, a
// publish that ended is never timed out, and at most one timer runs (none while nothing is in flight).

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

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

describe('PublishDeadlines', () => {
  it('times publishes out in start order, once each, never one that ended, and leaves no timer when none is in flight', async () => {
    const timedOut: string[] = [];
    current = new PublishDeadlines(40, () => 'timeout');
    const [a, b, c] = ['a', 'b', 'c'].map((name) => call(name, timedOut));
    current.add(a);
    await sleep(10);
    current.add(b);
    current.add(c);
    current.remove(b); // b ended in time
    await sleep(15);
    assert.deepEqual(timedOut, []);
    await sleep(40);
    assert.deepEqual(timedOut, ['a:timeout', 'c:timeout']);
    assert.equal(timerOf(current), undefined, 'no timer once the list is empty');
    current.add(call('d', timedOut));
    current.remove((current as unknown as { head: PublishCall }).head);
    assert.equal(timerOf(current), undefined, 'the timer stops when the last publish ends');
    await sleep(60);
    assert.deepEqual(timedOut, ['a:timeout', 'c:timeout']);
  });

  it('a publish started while timeouts are handled (its slot freed by one) gets its own deadline, with one timer', async () => {
    const timedOut: string[] = [];
    const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;
    const before = timers();
    current = new PublishDeadlines(30, () => 'timeout');
    let started: PublishCall | undefined;
    const first = call('first', timedOut, () => {
      started = call('next', timedOut);
      current.add(started);
    });
    current.add(first);
    await sleep(45);
    assert.deepEqual(timedOut, ['first:timeout']);
    assert.ok(timerOf(current), 'a timer for the publish started meanwhile');
    assert.equal(timers(), before + 1, 'one timer, not one more per publish started while timing out');
    await sleep(40);
    assert.deepEqual(timedOut, ['first:timeout', 'next:timeout']);
    assert.equal(timerOf(current), undefined);
  });
});
