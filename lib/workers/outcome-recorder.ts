// Worker runtime: the one outcome recorder. How a worker's attempt on a claimed message ends,
// written and reported the same way by every worker: once its row is complete it reports the event
// that metrics count; a failed attempt is retried with backoff or dead-lettered, fenced, with its
// event and log line. Used by OutboxPoller, InboxRelay and PullWorker (through inboxOutcomeRecorder).

import type { Logger } from '@nestjs/common';
import { describeError } from '../common/errors';
import type { InboxEventMessage, OutboxEventMessage, QueueBoxEventMap, QueueBoxEvents } from '../events/queuebox.events';
import type { LeaseService } from '../lease/lease.service';
import type { WorkerClaim } from '../lease/lease.types';
import { messages } from '../queuebox.messages';

/** The events of each worker's outcomes (`QueueBoxMetrics` counts them). */
const EVENTS = {
  outbox: { completed: 'queuebox:published', retryScheduled: 'queuebox:retry-scheduled', deadLettered: 'queuebox:dead-lettered' },
  inbox: {
    completed: 'queuebox:inbox:processed',
    retryScheduled: 'queuebox:inbox:retry-scheduled',
    deadLettered: 'queuebox:inbox:dead-lettered',
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

/** What a failed attempt leads to: a dead letter with its reason, or a retry after `delayMs`. */
type FailedAttemptOutcome = { deadLetter: true; reason: string } | { deadLetter: false; delayMs: number };

/** What the recorder needs to know about one worker. */
export interface RecordingWorker<C extends WorkerClaim<unknown>> {
  lease: LeaseService;
  events: QueueBoxEvents;
  logger: Logger;
  /** Names a message in logs: its message id (outbox), `source/idempotencyKey` (inbox). */
  nameOf(message: C['message']): string;
  /** What every event about the claim's message says of it. */
  eventMessage(claim: C): OutboxEventMessage | InboxEventMessage;
  /** Failures that would fail the same way again (`PermanentPublishError`, `QueueBoxValidationError`): dead-lettered at once. */
  isFinal(failure: unknown): boolean;
}

/** Records the outcomes of one worker's claims. */
export class OutcomeRecorder<C extends WorkerClaim<unknown>> {
  constructor(private readonly worker: RecordingWorker<C>) {}

  /**
   * Reports a claim whose row was completed: `published` for the outbox, `processed` for the
   * relay (with `forwarded`) and pull workers (with `handler`).
   */
  completed(claim: C, details: { durationMs: number; forwarded?: number; handler?: string }): void {
    const name = EVENTS[claim.component].completed;
    // `details` holds what that component's event adds (`forwarded`, `handler`): the worker knows it, the type cannot.
    this.worker.events.emit(name, { ...this.worker.eventMessage(claim), ...details } as QueueBoxEventMap[typeof name]);
  }

  /**
   * Records a failed attempt, fenced: dead-lettered when the failure is final, `retryIf` declines
   * it or the attempts are used up; otherwise retried after the policy's backoff. A claim lost
   * meanwhile is logged and left alone; a failing write is logged (the lease ends the claim).
   */
  async failed(
    claim: C,
    failure: unknown,
    p: {
      policy: FailurePolicy<C['message']>;
      /** How long the failed attempt took. */
      durationMs: number;
      /** The log line of a scheduled retry. */
      retryLog: (error: string, delayMs: number) => string;
    },
  ): Promise<void> {
    const { lease, logger } = this.worker;
    const id = this.worker.nameOf(claim.message);
    const event = this.worker.eventMessage(claim);
    const names = EVENTS[claim.component];
    let what = 'retry'; // the backoff may throw
    try {
      const { maxAttempts, backoff, retryIf } = p.policy;
      const final = this.worker.isFinal(failure);
      const next = failedAttemptOutcome({ failure, final, attempt: claim.attempt, message: claim.message, maxAttempts, backoff, retryIf });
      if (next.deadLetter) {
        what = 'dead-letter';
        const { reason } = next;
        if (await lease.deadLetter(claim, reason)) {
          this.worker.events.emit(names.deadLettered, { ...event, reason, durationMs: p.durationMs });
          logger.warn(messages.deadLettered(id, reason));
        } else {
          logger.warn(messages.finishLost(id, what));
        }
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
}

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
  return { deadLetter: false, delayMs: Math.max(0, Math.round(p.backoff(attempt, failure, p.message))) };
}

function retryAllowed<M>(p: FailurePolicy<M> & { attempt: number; message: M }, failure: unknown): boolean {
  try {
    return p.retryIf === undefined || p.retryIf(failure, p.attempt, p.message) !== false;
  } catch {
    return true;
  }
}
