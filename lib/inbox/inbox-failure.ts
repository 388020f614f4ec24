import type { Logger } from '@nestjs/common';
import { describeError, isInstance } from '../common/errors';
import { failedAttemptOutcome } from '../common/failed-attempt';
import { QueueBoxValidationError } from '../errors/queuebox.errors';
import { inboxEventMessage, type QueueBoxEvents } from '../events/queuebox.events';
import type { LeaseService } from '../lease/lease.service';
import type { InboxClaim } from '../lease/lease.types';
import { messages } from '../queuebox.messages';
import type { InboxMessage } from './inbox.types';

/**
 * Records a failed attempt on an inbox row, fenced: dead-letter when the attempts are used up or
 * the failure is a `QueueBoxValidationError` (it would fail the same way again) or `retryIf`
 * declines it, otherwise retry after `backoff(attempt, error, message)`. Shared by the relay and
 * the pull workers.
 */
export async function retryOrDeadLetter(p: {
  claim: InboxClaim;
  failure: unknown;
  maxAttempts: number;
  backoff: (attempt: number, error: unknown, message: InboxMessage) => number;
  /** `retry.retryIf`: false dead-letters now. */
  retryIf?: (error: unknown, attempt: number, message: InboxMessage) => boolean;
  lease: LeaseService;
  events: QueueBoxEvents;
  /** How long the failed attempt took. */
  durationMs: number;
  logger: Logger;
  /** The log line of a scheduled retry. */
  retryMessage: (error: string, delayMs: number) => string;
}): Promise<void> {
  const { claim, failure, lease, logger } = p;
  const id = `${claim.message.source}/${claim.message.idempotencyKey}`;
  const event = { ...inboxEventMessage(claim.component, claim.message), durationMs: p.durationMs };
  const prefix = claim.component === 'pull' ? 'queuebox:pull' : 'queuebox:inbox';
  let what = 'retry'; // the backoff may throw
  try {
    const next = failedAttemptOutcome({
      failure,
      // It would fail the same way again.
      final: isInstance(failure, QueueBoxValidationError),
      attempt: claim.attempt,
      maxAttempts: p.maxAttempts,
      message: claim.message,
      retryIf: p.retryIf,
      backoff: p.backoff,
    });
    if (next.deadLetter) {
      what = 'dead-letter';
      const { reason } = next;
      if (await lease.deadLetter(claim, reason)) {
        p.events.emit(`${prefix}:dead-lettered`, { ...event, reason });
        logger.warn(messages.deadLettered(id, reason));
      } else {
        logger.warn(messages.finishLost(id, what));
      }
      return;
    }
    const { delayMs } = next;
    if (await lease.retry(claim, { delayMs, error: failure })) {
      p.events.emit(`${prefix}:retry-scheduled`, { ...event, delayMs, error: describeError(failure) });
      logger.warn(p.retryMessage(describeError(failure), delayMs));
    } else {
      logger.warn(messages.finishLost(id, what));
    }
  } catch (error) {
    logger.error(messages.finishFailed(id, what, describeError(error)));
  }
}
