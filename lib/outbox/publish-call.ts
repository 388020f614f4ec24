import type { KeeperWatcher, LeaseKeeper } from '../lease/lease-keeper';
import type { OutboundMessage } from '../types/messages';
import type { Publisher } from '../types/outbox';

/**
 * How long a publish may still run after its signal aborted before it counts as ignoring the
 * signal: one that honours it settles within a few event-loop turns (fetch rejects at once), so
 * half a second tells the two apart without a false warning on a busy process. A publish that
 * timed out is waited for that long: what it settles to by then is its outcome.
 */
export const ABORT_GRACE_MS = 500;

/** What aborted a publish's signal: its `publishTimeout`, the loss of its claim, or the shutdown that stopped waiting for it. */
export type PublishAbort = 'timeout' | 'claim lost' | 'shutdown';

/** Why a publish did not publish: what it threw or rejected with, or the reason its signal aborted. */
export interface PublishFailure {
  error: unknown;
  /** The publish had not ended when it was given up (timeout, lost claim, shutdown): it may still run. */
  overran: boolean;
  /** Set when QueueBox gave the publish up (aborted its signal): which cause did. */
  abortedBy?: PublishAbort;
}

/**
 * One publish of one claimed message: the publisher's call with its own signal (a new
 * AbortController per publish: on Node.js 22 and later one costs less to make, about 0.1 to 0.5 KB
 * and 0.03 to 0.07 µs, than checking that a used one is as good as new), its deadline
 * (`publishTimeout`, kept by `PublishDeadlines`: one timer for all publishes, not one each) and
 * the claim's keeper watching it (a lost claim or shutdown aborts it): one object per publish,
 * with no closures but the two its promise is given.
 *
 * It ends once (`start` resolves): when the publisher's promise settles, or when it is given up
 * (its signal aborted: lost claim, shutdown, or a timeout it outlived by `ABORT_GRACE_MS`). A
 * publish given up that still runs is `publishing`; the caller keeps its concurrency slot until
 * that settles.
 */
export class PublishCall implements KeeperWatcher, TimedPublish {
  /** Deadline list links (`PublishDeadlines`). */
  prev?: TimedPublish;
  next?: TimedPublish;
  deadline = 0;
  /** Ended: published, failed, timed out or aborted (what the publisher does after that is not waited for here). */
  ended = false;
  /** The publisher's promise, once it was called. */
  publishing?: PromiseLike<unknown>;
  /** Set while a publish that timed out has its grace to settle (`afterTimeout`). */
  private graceTimer?: NodeJS.Timeout;

  constructor(
    readonly message: OutboundMessage,
    readonly keeper: LeaseKeeper,
    private readonly controller: AbortController,
    private readonly deadlines: PublishDeadlines,
  ) {}

  /** Told how the call ended, once. */
  private tell?: (failure: PublishFailure | undefined) => void;

  /**
   * Calls the publisher (synchronously: a throw is a failure like a rejection) and resolves once
   * the call ended: to `undefined` when it published, to its `PublishFailure` otherwise (never
   * rejects). A keeper already aborted (the claim lost meanwhile) ends the call before the
   * publisher is called.
   */
  start(publisher: Publisher): Promise<PublishFailure | undefined> {
    return new Promise((resolve) => {
      this.tell = resolve;
      this.call(publisher);
    });
  }

  private call(publisher: Publisher): void {
    if (!this.keeper.watch(this)) {
      this.giveUp(this.keeper.signal.reason, this.keeper.lost ? 'claim lost' : 'shutdown');
      return;
    }
    this.deadlines.add(this);
    let publishing: unknown;
    try {
      publishing = publisher.publish(this.message, this.controller.signal);
    } catch (error) {
      this.rejected(error);
      return;
    }
    this.publishing = follow(this, publishing);
  }

  /** The publish timed out (`PublishDeadlines`): its signal aborts, and what it settles to within the grace is its outcome. */
  timedOut(reason: unknown): void {
    this.graceTimer = afterTimeout(this, this.controller, this.deadlines, reason);
  }

  /** The claim was lost (a `ClaimLostError`), or shutdown stopped waiting (the keeper aborted). */
  keeperAborted(reason: unknown): void {
    this.giveUp(reason, this.keeper.lost ? 'claim lost' : 'shutdown');
  }

  /** @internal (`follow`) */
  fulfilled(): void {
    if (this.settle()) this.tell?.(undefined);
  }

  /** @internal (`follow`) */
  rejected(error: unknown): void {
    if (this.settle()) this.tell?.(failureOf(error, this.controller.signal));
  }

  /** Ends the call (the publisher's work settled, or it was given up): false when it had ended already. */
  private settle(): boolean {
    if (this.ended) return false;
    this.ended = true;
    this.deadlines.remove(this);
    clearTimeout(this.graceTimer);
    this.keeper.unwatch();
    return true;
  }

  /** Aborts the signal and ends the call with its reason; a publish still running overruns. */
  giveUp(reason: unknown, abortedBy: PublishAbort): void {
    if (!this.settle()) return;
    const { signal } = this.controller;
    if (!signal.aborted) this.controller.abort(reason);
    this.tell?.({ error: signal.reason, overran: this.publishing !== undefined, abortedBy });
  }
}

/**
 * A publish (or call) past its deadline: out of the deadline list, its signal aborted, and given
 * `ABORT_GRACE_MS` to settle. A publisher that honours the signal settles in that time, and what
 * it settles to is the outcome: a call's messages it reports published are not sent again. One
 * still running then is given up (`timeout`), as it ignores its signal. Returns the grace's timer.
 */
export function afterTimeout(
  call: TimedPublish & { giveUp(reason: unknown, abortedBy: PublishAbort): void },
  controller: AbortController,
  deadlines: PublishDeadlines,
  reason: unknown,
): NodeJS.Timeout {
  deadlines.remove(call);
  controller.abort(reason);
  return setTimeout(() => call.giveUp(reason, 'timeout'), ABORT_GRACE_MS);
}

/**
 * A publish's failure from what it rejected with. After its timeout aborted it, a rejection with
 * the signal's reason or an `AbortError` is the timeout (its error names the limit that was
 * passed); any other error is the publisher's own (a `PermanentPublishError` stays permanent).
 */
export function failureOf(error: unknown, signal: AbortSignal): PublishFailure {
  if (signal.aborted && (error === signal.reason || (error instanceof Error && error.name === 'AbortError')))
    return { error: signal.reason, overran: false, abortedBy: 'timeout' };
  return { error, overran: false };
}

/**
 * Hands what a publisher's method returned to `call`: a promise's outcome when it settles, any
 * other value as fulfilled in a microtask, as a promise's would be (ending now would start the
 * next publish inside this one's call). Returns the promise, when there is one.
 */
export function follow(
  call: { fulfilled(value: unknown): void; rejected(error: unknown): void },
  publishing: unknown,
): PromiseLike<unknown> | undefined {
  if (isThenable(publishing)) {
    publishing.then(
      (value) => call.fulfilled(value),
      (error: unknown) => call.rejected(error),
    );
    return publishing;
  }
  queueMicrotask(() => call.fulfilled(publishing));
  return undefined;
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof (value as PromiseLike<unknown>).then === 'function'
  );
}

/** A publish call with a deadline: one message's (`PublishCall`) or a batch's (`PublishBatchCall`). */
export interface TimedPublish {
  prev?: TimedPublish;
  next?: TimedPublish;
  deadline: number;
  timedOut(reason: unknown): void;
}

/**
 * The deadlines of the publishes in flight, with one timer. Every publish has the same timeout, so
 * their deadlines come in the order they started: a list in start order, a publish unlinked when
 * it ends, and one timer for the oldest, moved on when it fires. No timer while none is in flight.
 */
export class PublishDeadlines {
  private head?: TimedPublish;
  private tail?: TimedPublish;
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly timeoutMs: number,
    private readonly reason: () => unknown,
  ) {}

  add(call: TimedPublish): void {
    call.deadline = performance.now() + this.timeoutMs;
    call.prev = this.tail;
    call.next = undefined;
    if (this.tail) this.tail.next = call;
    else this.head = call;
    this.tail = call;
    if (!this.timer) this.arm(this.timeoutMs);
  }

  remove(call: TimedPublish): void {
    if (call.prev === undefined && this.head !== call) return; // not in the list
    if (call.prev) call.prev.next = call.next;
    else this.head = call.next;
    if (call.next) call.next.prev = call.prev;
    else this.tail = call.prev;
    call.prev = undefined;
    call.next = undefined;
    if (!this.head && this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
  }

  /** One timer at a time: a publish that starts while `expire` runs (a slot freed by a timeout) must not leave a second one. */
  private arm(ms: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => this.expire(), Math.max(1, Math.ceil(ms)));
  }

  /** Times out every publish past its deadline, oldest first; the timer then waits for the next. */
  private expire(): void {
    this.timer = undefined;
    const now = performance.now();
    while (this.head && this.head.deadline <= now) this.head.timedOut(this.reason());
    if (this.head) this.arm(this.head.deadline - performance.now());
  }
}
