import { messages } from '../queuebox.messages';
import { describeError } from './errors';

/** What a failed attempt leads to: a dead letter with its reason, or a retry after `delayMs`. */
export type FailedAttemptOutcome = { deadLetter: true; reason: string } | { deadLetter: false; delayMs: number };

/**
 * The retry policy applied to one failed attempt, the same for every worker: dead-letter at once
 * when the failure is `final` (a `PermanentPublishError`, a `QueueBoxValidationError`), when
 * `retryIf` declines it, or when the attempts are used up; otherwise retry after
 * `backoff(attempt, error, message)`. A `retryIf` that throws does not stop the retries (the
 * attempts still bound them). A `backoff` that throws, throws here.
 */
export function failedAttemptOutcome<M>(p: {
  failure: unknown;
  final: boolean;
  attempt: number;
  maxAttempts: number;
  message: M;
  retryIf?: (error: unknown, attempt: number, message: M) => boolean;
  backoff: (attempt: number, error: unknown, message: M) => number;
}): FailedAttemptOutcome {
  const { failure, attempt } = p;
  if (p.final) return { deadLetter: true, reason: describeError(failure) };
  if (attempt >= p.maxAttempts) return { deadLetter: true, reason: messages.attemptsExhausted(attempt, describeError(failure)) };
  if (!retryAllowed(p, failure)) return { deadLetter: true, reason: messages.retryDeclined(attempt, describeError(failure)) };
  return { deadLetter: false, delayMs: Math.max(0, Math.round(p.backoff(attempt, failure, p.message))) };
}

function retryAllowed<M>(
  p: { retryIf?: (error: unknown, attempt: number, message: M) => boolean; attempt: number; message: M },
  failure: unknown,
): boolean {
  try {
    return p.retryIf === undefined || p.retryIf(failure, p.attempt, p.message) !== false;
  } catch {
    return true;
  }
}
