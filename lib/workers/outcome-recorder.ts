// Worker runtime: a worker's step on a claim returns how it ended (a StepOutcome); the one outcome
// recorder writes that to the row (fenced: complete, retry with backoff, dead-letter, release) and
// reports it (events, which metrics count, and logs). Every worker records through it: the outbox
// poller, the inbox relay and the pull worker.

import type { Logger } from '@nestjs/common';
import { describeError, isInstance } from '../common/errors';
import { LEASE_EXPIRED_CLASS } from '../common/fingerprint';
import { PublishError } from '../errors/queuebox.errors';
import type { InboxEventMessage, OutboxEventMessage, QueueBoxEventMap, QueueBoxEvents } from '../events/queuebox.events';
import type { LeaseService } from '../lease/lease.service';
import { messages } from '../texts/queuebox.messages';
import type { Claim, WorkerClaim } from '../types/claims';
import type { BatchWaiter } from './turn-batcher';

/** The events of each worker's outcomes (`QueueBoxMetrics` counts them). */
const EVENTS = {
  outbox: { completed: 'queuebox:published', retryScheduled: 'queuebox:retry-scheduled', deadLettered: 'queuebox:dead-lettered' },
  relay: {
    completed: 'queuebox:relay:processed',
    retryScheduled: 'queuebox:relay:retry-scheduled',
    deadLettered: 'queuebox:relay:dead-lettered',
  },
  pull: {
    completed: 'queuebox:pull:processed',
    retryScheduled: 'queuebox:pull:retry-scheduled',
    deadLettered: 'queuebox:pull:dead-lettered',
  },
} as const;

/** A worker's (or a pull handler's) resolved retry options. */
export interface FailurePolicy<M> {
  maxAttempts: number;
  backoff: (attempt: number, error: unknown, message: M) => number;
  /** `retry.retryIf`: false dead-letters now. */
  retryIf?: (error: unknown, attempt: number, message: M) => boolean;
}

/** What a completed event adds for its component: `forwarded` (relay), `handler` (pull). */
export interface CompletedDetails {
  durationMs: number;
  forwarded?: number;
  handler?: string;
}

/**
 * How one step on a claim ended:
 * - `succeeded`: the work is done (a publish); the recorder writes the row's completion, fenced
 *   (with `followers`, published after it under its claim, finished with it in one statement);
 * - `committed`: the step wrote the row's completion itself, in its own transaction (with
 *   `followers`, finished under it); the recorder only reports it;
 * - `failed`: the attempt failed; the recorder retries it after the policy's backoff, or dead-letters it;
 * - `expired`: the row's earlier claims all expired, up to its attempts (its workers died or hung
 *   on it: a pull claim takes expired rows itself, with no reclaim step); dead-lettered with
 *   `reason` and reported as the reclaim step reports one (`queuebox:reclaimed`);
 * - `lost`: the claim is lost (logged at `level`); nothing more is written;
 * - `released`: the work did not fail (a batch rolled back for another row): back to `pending`, the attempt not counted;
 * - `deferred`: the work was put off (an outbox destination's rate limit had no token): back to `pending` for `delayMs`, the attempt not counted;
 * - `abandoned`: shutdown stopped waiting; nothing is written here: the instance's deregistration
 *   releases the row (`pending`, the attempt not counted), or the lease ends it if that cannot run.
 */
export type StepOutcome<C extends WorkerClaim<unknown>> =
  | { kind: 'succeeded'; durationMs: number; followers?: readonly FinishedFollower<C>[] }
  | { kind: 'committed'; details: CompletedDetails; followers?: readonly FinishedFollower<C>[] }
  | {
      kind: 'failed';
      failure: unknown;
      durationMs: number;
      policy: FailurePolicy<C['message']>;
      /** The log line of a scheduled retry. */
      retryLog: (error: string, delayMs: number) => string;
    }
  | { kind: 'expired'; reason: string }
  | { kind: 'lost'; level: 'warn' | 'error'; log: string }
  | { kind: 'released' }
  | { kind: 'deferred'; delayMs: number }
  | { kind: 'abandoned' };

/** A follower whose work was done under its head's claim, and what its completed event says. */
export interface FinishedFollower<C extends WorkerClaim<unknown>> {
  claim: WorkerClaim<C['message']>;
  details: CompletedDetails;
}

/** What the recorder needs to know about one worker. */
export interface RecordingWorker<C extends WorkerClaim<unknown>> {
  lease: LeaseService;
  events: QueueBoxEvents;
  logger: Logger;
  /** Names a message in logs: its message id (outbox), `source/idempotencyKey` (inbox). */
  nameOf(message: C['message']): string;
  /** What every event about the claim's message says of it: a new object at each call (the recorder adds to it). */
  eventMessage(claim: WorkerClaim<C['message']>): OutboxEventMessage | InboxEventMessage;
  /** Failures that would fail the same way again (`PermanentPublishError`, `QueueBoxValidationError`): dead-lettered at once. */
  isFinal(failure: unknown): boolean;
  /**
   * Completes a row whose work is done (`succeeded` outcomes), with others: tells `waiter` whether
   * its claim's row was completed (false: the claim was lost), or that the write failed. Without
   * it, `lease.complete`.
   */
  complete?(waiter: CompletionWaiter): void;
  /**
   * Completes a head and the followers published under its claim (`succeeded` outcomes with
   * followers), in one statement: whether the head's fence held, and the followers it finished.
   */
  completeWithFollowers?(claim: C, followers: readonly WorkerClaim<C['message']>[]): Promise<{ head: boolean; followers: Set<string> }>;
  /** The log line of a `succeeded` outcome whose completion lost the claim (the work was done: a duplicate follows). */
  completionLost?(claim: C): string;
}

/** What the recorder did with an outcome: whether it finished the row (`sent`/`processed`). */
export type Recorded = 'finished' | 'not finished';

/**
 * A claim whose completion is asked of a batching completer (`RecordingWorker.complete`): its
 * `item` is the claim, `resolve` says whether the statement completed its row, `reject` that the
 * statement failed.
 */
export type CompletionWaiter = BatchWaiter<Claim, boolean>;

/** Records the outcomes of one worker's claims. */
export class OutcomeRecorder<C extends WorkerClaim<unknown>> {
  constructor(private readonly worker: RecordingWorker<C>) {}

  /** Writes and reports `outcome`. Never throws: a write that fails is logged (the lease ends the claim). */
  record(claim: C, outcome: StepOutcome<C>): Promise<Recorded> {
    // The common outcome goes straight to its completion's promise, not through one more frame.
    return outcome.kind === 'succeeded' ? this.complete(claim, outcome) : this.recordOther(claim, outcome);
  }

  private async recordOther(claim: C, outcome: Exclude<StepOutcome<C>, { kind: 'succeeded' }>): Promise<Recorded> {
    switch (outcome.kind) {
      case 'committed':
        this.completed(claim, outcome.details);
        for (const follower of outcome.followers ?? []) this.completed(follower.claim, follower.details);
        return 'finished';
      case 'failed':
        await this.failed(claim, outcome);
        return 'not finished';
      case 'expired':
        await this.deadLetter(claim, outcome.reason, { errorClass: LEASE_EXPIRED_CLASS }, () => {
          const event = this.worker.eventMessage(claim);
          const name = 'destination' in event ? event.destination : event.source;
          this.worker.events.emit('queuebox:reclaimed', { component: claim.component, name, pending: 0, dead: 1 });
        });
        return 'not finished';
      case 'lost':
        this.worker.lease.markLost(claim);
        this.worker.logger[outcome.level](outcome.log);
        return 'not finished';
      case 'released':
        await this.worker.lease
          .release(claim)
          .catch((error) => this.worker.logger.warn(messages.releaseFailed(claim.id, describeError(error))));
        return 'not finished';
      case 'deferred':
        await this.deferred(claim, outcome.delayMs);
        return 'not finished';
      case 'abandoned':
        return 'not finished';
    }
  }

  /** Completes the row, fenced (with others, when the worker batches completions), and reports it. */
  private complete(claim: C, outcome: Extract<StepOutcome<C>, { kind: 'succeeded' }>): Promise<Recorded> {
    const { complete, completeWithFollowers } = this.worker;
    if (outcome.followers?.length && completeWithFollowers)
      return this.withFollowers(claim, outcome, outcome.followers, completeWithFollowers);
    if (complete) return new Promise((resolve) => complete(new Completion(this, claim, outcome, resolve)));
    return this.worker.lease.complete(claim).then(
      (completed) => this.completionWritten(claim, outcome, completed),
      (error: unknown) => this.completionFailed(claim, error),
    );
  }

  /** Completes the head and its followers in one statement; reports the head, and each follower it finished. */
  private async withFollowers(
    claim: C,
    outcome: CompletedDetails,
    followers: readonly FinishedFollower<C>[],
    write: NonNullable<RecordingWorker<C>['completeWithFollowers']>,
  ): Promise<Recorded> {
    let done: { head: boolean; followers: Set<string> };
    try {
      done = await write(
        claim,
        followers.map((follower) => follower.claim),
      );
    } catch (error) {
      return this.completionFailed(claim, error);
    }
    const recorded = this.completionWritten(claim, outcome, done.head);
    for (const follower of followers) if (done.followers.has(follower.claim.id)) this.completed(follower.claim, follower.details);
    return recorded;
  }

  /** @internal A completion was written: reported, or lost (logged). */
  completionWritten(claim: C, outcome: CompletedDetails, completed: boolean): Recorded {
    const { logger } = this.worker;
    try {
      if (completed) {
        this.completed(claim, outcome);
        return 'finished';
      }
      logger.error(this.worker.completionLost?.(claim) ?? messages.finishLost(this.worker.nameOf(claim.message), 'completion'));
    } catch (error) {
      return this.completionFailed(claim, error);
    }
    return 'not finished';
  }

  /** @internal A completion's write failed: logged (the lease ends the claim). */
  completionFailed(claim: C, error: unknown): Recorded {
    this.worker.logger.error(messages.finishFailed(this.worker.nameOf(claim.message), 'delivery', describeError(error)));
    return 'not finished';
  }

  /** Puts the claim off, fenced, and reports it (`queuebox:rate-limited`); a lost claim or a failing write is logged. */
  private async deferred(claim: C, delayMs: number): Promise<void> {
    const { lease, logger } = this.worker;
    const id = this.worker.nameOf(claim.message);
    try {
      if (await lease.defer(claim, delayMs)) {
        this.worker.events.emit('queuebox:rate-limited', { ...(this.worker.eventMessage(claim) as OutboxEventMessage), delayMs });
      } else {
        logger.warn(messages.finishLost(id, 'deferral'));
      }
    } catch (error) {
      logger.error(messages.finishFailed(id, 'deferral', describeError(error)));
    }
  }

  /**
   * Reports a claim whose row was completed: one event object per message, the worker's fresh
   * event message with what the component's event adds set on it (`durationMs`, and `forwarded`
   * or `handler`: the worker knows which, the type cannot), not a spread of both into a third.
   */
  private completed(claim: WorkerClaim<C['message']>, details: CompletedDetails): void {
    const name = EVENTS[claim.component].completed;
    const event = this.worker.eventMessage(claim) as (OutboxEventMessage | InboxEventMessage) & CompletedDetails;
    event.durationMs = details.durationMs;
    if (details.forwarded !== undefined) event.forwarded = details.forwarded;
    if (details.handler !== undefined) event.handler = details.handler;
    this.worker.events.emit(name, event as QueueBoxEventMap[typeof name]);
  }

  /**
   * Records a failed attempt, fenced: dead-lettered when the failure is final, `retryIf` declines
   * it or the attempts are used up; otherwise retried after the policy's backoff. A claim lost
   * meanwhile is logged and left alone; a failing write is logged (the lease ends the claim).
   */
  private async failed(claim: C, p: Extract<StepOutcome<C>, { kind: 'failed' }>): Promise<void> {
    const { lease, logger } = this.worker;
    const { failure } = p;
    const id = this.worker.nameOf(claim.message);
    const event = this.worker.eventMessage(claim);
    const names = EVENTS[claim.component];
    const what = 'retry'; // the backoff may throw
    try {
      const { maxAttempts, backoff, retryIf } = p.policy;
      const final = this.worker.isFinal(failure);
      const next = failedAttemptOutcome({ failure, final, attempt: claim.attempt, message: claim.message, maxAttempts, backoff, retryIf });
      if (next.deadLetter) {
        const { reason } = next;
        await this.deadLetter(claim, reason, { failure }, () =>
          this.worker.events.emit(names.deadLettered, { ...event, reason, durationMs: p.durationMs }),
        );
        return;
      }
      const { delayMs } = next;
      if (await lease.retry(claim, { delayMs, error: failure })) {
        const error = describeError(failure);
        this.worker.events.emit(names.retryScheduled, { ...event, delayMs, error, durationMs: p.durationMs });
        logger.warn(p.retryLog(error, delayMs));
      } else {
        logger.warn(messages.finishLost(id, what));
      }
    } catch (error) {
      logger.error(messages.finishFailed(id, what, describeError(error)));
    }
  }

  /**
   * The one dead-letter write of every worker: fenced, with its fingerprint (from the failure, or
   * the reason under `errorClass`) and, with `attemptHistory`, the attempt recorded in the same
   * statement; `report` emits its event once it changed the row. A lost claim or a failing write is logged (the lease ends the claim).
   */
  private async deadLetter(
    claim: C,
    reason: string,
    cause: { failure: unknown } | { errorClass: string },
    report: () => void,
  ): Promise<void> {
    const { lease, logger } = this.worker;
    const id = this.worker.nameOf(claim.message);
    try {
      if (await lease.deadLetter(claim, reason, cause)) {
        report();
        logger.warn(messages.deadLettered(id, reason));
      } else {
        logger.warn(messages.finishLost(id, 'dead-letter'));
      }
    } catch (error) {
      logger.error(messages.finishFailed(id, 'dead-letter', describeError(error)));
    }
  }
}

/** What a failed attempt leads to: a dead letter with its reason, or a retry after `delayMs`. */
type FailedAttemptOutcome = { deadLetter: true; reason: string } | { deadLetter: false; delayMs: number };

/**
 * The retry policy applied to one failed attempt, the same for every worker: dead-letter at once
 * when the failure is `final`, when `retryIf` declines it, or when the attempts are used up;
 * otherwise retry after `backoff(attempt, error, message)`. A `retryIf` that throws does not stop
 * the retries (the attempts still bound them). A `backoff` that throws, throws here.
 */
function failedAttemptOutcome<M>(
  p: FailurePolicy<M> & { failure: unknown; final: boolean; attempt: number; message: M },
): FailedAttemptOutcome {
  const { failure, attempt } = p;
  if (p.final) return { deadLetter: true, reason: describeError(failure) };
  if (attempt >= p.maxAttempts) return { deadLetter: true, reason: messages.attemptsExhausted(attempt, describeError(failure)) };
  if (!retryAllowed(p, failure)) return { deadLetter: true, reason: messages.retryDeclined(attempt, describeError(failure)) };
  // The destination said when to come back (Retry-After): that, not the backoff.
  const toldToWait = isInstance(failure, PublishError) ? failure.retryAfterMs : undefined;
  if (toldToWait !== undefined) return { deadLetter: false, delayMs: toldToWait };
  return { deadLetter: false, delayMs: Math.max(0, Math.round(p.backoff(attempt, failure, p.message))) };
}

function retryAllowed<M>(p: FailurePolicy<M> & { attempt: number; message: M }, failure: unknown): boolean {
  try {
    return p.retryIf === undefined || p.retryIf(failure, p.attempt, p.message) !== false;
  } catch {
    return true;
  }
}

/** One message's batched completion: told by the completer how the statement went, it resolves the recording. */
class Completion<C extends WorkerClaim<unknown>> implements CompletionWaiter {
  constructor(
    private readonly recorder: OutcomeRecorder<C>,
    readonly item: C,
    private readonly outcome: CompletedDetails,
    private readonly recorded: (recorded: Recorded) => void,
  ) {}

  resolve(completed: boolean): void {
    this.recorded(this.recorder.completionWritten(this.item, this.outcome, completed));
  }

  reject(error: unknown): void {
    this.recorded(this.recorder.completionFailed(this.item, error));
  }
}
