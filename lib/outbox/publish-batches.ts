import { PublishError } from '../errors/queuebox.errors';
import type { KeeperWatcher, LeaseKeeper } from '../lease/lease-keeper';
import { messages } from '../texts/queuebox.messages';
import { type BatchedSpan, startBatchedSpan } from '../tracing/trace-context';
import type { OutboxClaim } from '../types/claims';
import type { OutboundMessage } from '../types/messages';
import type { PublishBatchResult, Publisher } from '../types/outbox';
import { BatchQueue } from '../workers/batch-queue';
import {
  afterTimeout,
  failureOf,
  follow,
  type PublishAbort,
  type PublishDeadlines,
  type PublishFailure,
  type TimedPublish,
} from './publish-call';

/** A claimed message that waits for, or is in, a `publishBatch` call, with the keeper renewing its claim. */
export interface BatchedClaim {
  claim: OutboxClaim;
  keeper: LeaseKeeper;
}

/**
 * How a batched message's publish ended: `undefined` published, its failure, or `released`: it
 * was handed back before any call took it (every call slot was stuck, or shutdown stopped waiting).
 */
export type BatchedEnd = PublishFailure | undefined | 'released';

/** What `PublishBatches` asks of the poller. */
export interface PublishBatchesHooks {
  /** Shutdown stopped waiting for work in flight: a keeper that aborts now aborts its whole call. */
  abandoned(): boolean;
  /** A call given up (timeout, shutdown) still runs: resolves when it ends (its call slot stays taken until then). */
  overran(publishing: PromiseLike<unknown>, messageIds: readonly string[], abortedBy: PublishAbort): Promise<void>;
  /** A call slot kept by a call that overran is free again. */
  slotFreed(): void;
}

/**
 * The outbox poller's `publishBatch` calls (issue 36): for each publisher that has the method, a
 * queue that gathers the claimed messages routed to it, in calls of up to `size` messages and at
 * most `concurrency` calls at once. The messages a claim statement returned join in one turn and
 * fill each call before the next (500 claims and a size of 100: 5 calls of 100; 50 claims: one
 * call), since each call is a round trip to the broker.
 */
export class PublishBatches {
  private readonly queues = new Map<Publisher, BatchQueue<BatchedClaim, BatchedEnd>>();

  constructor(
    private readonly limits: { size: number; concurrency: number },
    private readonly deadlines: PublishDeadlines,
    private readonly hooks: PublishBatchesHooks,
  ) {}

  /** Has `claimed` published in the next call of `publisher` that has room; resolves to how its publish ended (never rejects). */
  publish(publisher: Publisher, claimed: BatchedClaim): Promise<BatchedEnd> {
    let queue = this.queues.get(publisher);
    if (!queue) {
      queue = new BatchQueue<BatchedClaim, BatchedEnd>(
        this.limits.size,
        this.limits.concurrency,
        (batch, holdSlot) => this.call(publisher, batch, holdSlot),
        () => this.hooks.slotFreed(),
        'fill',
      );
      this.queues.set(publisher, queue);
    }
    return queue.add(claimed);
  }

  /** Call slots kept by calls that timed out and still run, of the publisher with the most (each publisher has `concurrency`). */
  get stuckSlots(): number {
    let most = 0;
    for (const queue of this.queues.values()) most = Math.max(most, queue.stuckSlots);
    return most;
  }

  /** Hands back every message that waits for a call (its publish ends `released`); resolves to their claims. */
  async releaseWaiting(): Promise<OutboxClaim[]> {
    const released: OutboxClaim[] = [];
    for (const queue of this.queues.values()) {
      for (const { claim } of await queue.takeWaiting(async () => 'released')) released.push(claim);
    }
    return released;
  }

  /**
   * One call of `publisher` with `batch`, outside the queues (a head's followers, in the head's
   * slot: `holdSlot` keeps that slot while a call given up still runs). Resolves to each message's end.
   */
  async call(
    publisher: Publisher,
    batch: BatchedClaim[],
    holdSlot: (until: Promise<unknown>) => void,
  ): Promise<(PublishFailure | undefined)[]> {
    const call = new PublishBatchCall(batch, new AbortController(), this.deadlines, this.hooks.abandoned);
    const ends = await call.start(publisher);
    if (call.overran && call.publishing) {
      holdSlot(this.hooks.overran(call.publishing, call.sentMessageIds(), call.abortedBy ?? 'timeout'));
    }
    return ends;
  }
}

/**
 * One `publishBatch` call: its own signal, its deadline (`publishTimeout`, for the whole call, on
 * the poller's one deadline timer) and its messages' keepers watched. A message whose claim was
 * lost before the call is left out of it; one lost during a call of many claims is not waited for
 * (its outcome is `lost`), while a call under one claim (a head's followers) is given up when that
 * claim is lost. Shutdown stopping its wait aborts the call. It ends once: when the publisher's
 * promise settles, or when it is given up (lost claim, shutdown, or a timeout it outlived by
 * `ABORT_GRACE_MS`). A call that settles within that grace after its timeout keeps its results:
 * the messages it reports published are not sent again.
 */
export class PublishBatchCall implements KeeperWatcher, TimedPublish {
  prev?: TimedPublish;
  next?: TimedPublish;
  deadline = 0;
  private ended = false;
  /** The publisher's promise, once it was called. */
  publishing?: PromiseLike<unknown>;
  /** What gave the call up, if something did. */
  abortedBy?: PublishAbort;
  /** Set while a call that timed out has its grace to settle (`afterTimeout`). */
  private graceTimer?: NodeJS.Timeout;
  /** Where in the batch the messages handed to the publisher are (those whose claim was held when it was called), in order. */
  private readonly sentAt: number[] = [];
  /** Each message's end, in the batch's order; filled in as the call ends. */
  private readonly ends: (PublishFailure | undefined)[];
  /** The publish span of each traced message (an OpenTelemetry tracer set up, or a trace to continue), in the batch's order. */
  private spans?: (BatchedSpan | undefined)[];
  private tell?: (ends: (PublishFailure | undefined)[]) => void;

  constructor(
    private readonly batch: readonly BatchedClaim[],
    private readonly controller: AbortController,
    private readonly deadlines: PublishDeadlines,
    private readonly abandoned: () => boolean,
  ) {
    this.ends = new Array(batch.length).fill(undefined);
  }

  /** The call was given up while the publisher's promise had not settled: it may still run. */
  get overran(): boolean {
    return this.abortedBy !== undefined && this.publishing !== undefined;
  }

  /** The message ids of those handed to the publisher. */
  sentMessageIds(): string[] {
    return this.sentAt.map((i) => this.batch[i].claim.message.messageId);
  }

  /** Calls the publisher and resolves once the call ended, to each message's end (never rejects). */
  start(publisher: Publisher): Promise<(PublishFailure | undefined)[]> {
    return new Promise((resolve) => {
      this.tell = resolve;
      this.call(publisher);
    });
  }

  private call(publisher: Publisher): void {
    const outgoing: OutboundMessage[] = [];
    // An index loop: an iterator's entries would cost an array per message.
    for (let i = 0; i < this.batch.length; i++) {
      const claimed = this.batch[i];
      const { keeper } = claimed;
      if (keeper.watch(this)) {
        this.sentAt.push(i);
        outgoing.push(this.traced(i, claimed.claim.message));
      } else if (keeper.lost) {
        this.ends[i] = { error: keeper.signal.reason, overran: false, abortedBy: 'claim lost' };
      } else {
        this.giveUp(keeper.signal.reason, 'shutdown');
        return;
      }
    }
    if (outgoing.length === 0) {
      this.settle();
      this.finish();
      return;
    }
    this.deadlines.add(this);
    let publishing: unknown;
    try {
      publishing = (publisher.publishBatch as NonNullable<Publisher['publishBatch']>)(outgoing, this.controller.signal);
    } catch (error) {
      this.rejected(error);
      return;
    }
    this.publishing = follow(this, publishing);
  }

  /** `message` as the publisher gets it: with its span's context in its headers when it is traced (a copy then). */
  private traced(i: number, message: OutboundMessage): OutboundMessage {
    const span = startBatchedSpan(message);
    if (!span) return message;
    this.spans ??= new Array(this.batch.length);
    this.spans[i] = span;
    return { ...message, headers: span.headers };
  }

  /** Tells the waiting messages how the call ended, once each span ended with its own message's result. */
  private finish(): void {
    if (this.spans) {
      for (let i = 0; i < this.spans.length; i++) {
        const end = this.ends[i];
        this.spans[i]?.end(end?.error);
      }
    }
    this.tell?.(this.ends);
  }

  timedOut(reason: unknown): void {
    this.graceTimer = afterTimeout(this, this.controller, this.deadlines, reason);
  }

  /**
   * A keeper of the call aborted: shutdown stopped waiting, or a claim was lost. The call is given
   * up, unless the lost claim is one of several: the others' messages go on.
   */
  keeperAborted(reason: unknown): void {
    if (this.abandoned()) this.giveUp(reason, 'shutdown');
    else if (this.underOneClaim()) this.giveUp(reason, 'claim lost');
  }

  /** Every message of the call is under the same claim (a head's followers, or a call of one). */
  private underOneClaim(): boolean {
    const [first] = this.batch;
    return this.batch.every((claimed) => claimed.keeper === first.keeper);
  }

  /** @internal (`follow`) */
  fulfilled(results: unknown): void {
    if (!this.settle()) return;
    if (results === undefined || results === null) {
      this.finish();
      return;
    }
    if (!isSettledResults(results, this.sentAt.length)) {
      const error = new PublishError(messages.publishBatchResultInvalid(this.sentAt.length, describeResults(results)));
      this.endSent({ error, overran: false });
      return;
    }
    const { signal } = this.controller;
    for (let n = 0; n < results.length; n++) {
      const result = results[n];
      if (result.status === 'rejected') this.ends[this.sentAt[n]] = failureOf(result.reason, signal);
    }
    this.finish();
  }

  /** @internal (`follow`) */
  rejected(error: unknown): void {
    if (this.settle()) this.endSent(failureOf(error, this.controller.signal));
  }

  /** Ends every message handed to the publisher with `failure`. */
  private endSent(failure: PublishFailure): void {
    for (const i of this.sentAt) this.ends[i] = failure;
    this.finish();
  }

  private settle(): boolean {
    if (this.ended) return false;
    this.ended = true;
    this.deadlines.remove(this);
    clearTimeout(this.graceTimer);
    for (const i of this.sentAt) this.batch[i].keeper.unwatch();
    return true;
  }

  /** Aborts the signal and ends the call with its reason: every message of it fails (and may still be published, if it overran). */
  giveUp(reason: unknown, abortedBy: PublishAbort): void {
    if (!this.settle()) return;
    this.abortedBy = abortedBy;
    const { signal } = this.controller;
    if (!signal.aborted) this.controller.abort(reason);
    const failure: PublishFailure = { error: signal.reason, overran: this.publishing !== undefined, abortedBy };
    if (this.publishing === undefined && abortedBy === 'shutdown') {
      // Not called yet (a keeper was aborted by the shutdown): nothing of the batch went out.
      this.ends.fill(failure);
      this.finish();
      return;
    }
    this.endSent(failure);
  }
}

function isSettledResults(results: unknown, count: number): results is PublishBatchResult {
  return (
    Array.isArray(results) &&
    results.length === count &&
    results.every(
      (result) =>
        typeof result === 'object' &&
        result !== null &&
        (result.status === 'fulfilled' || (result.status === 'rejected' && 'reason' in result)),
    )
  );
}

function describeResults(results: unknown): string {
  if (Array.isArray(results)) return `an array of ${results.length} item(s)`;
  return typeof results === 'object' ? 'an object' : `a ${typeof results}`;
}
