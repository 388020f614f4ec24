import type { Duration } from './duration';

/** Exponential backoff between attempts (the `backoff` option; `retry.backoff` is the newer form). */
export interface BackoffOptions {
  /** Delay after the first failed attempt. Default 1000 ms. */
  initialMs?: number;
  /** Growth per attempt. Default 2. */
  factor?: number;
  /** Upper bound of one delay. Default 300000 ms (5 minutes). */
  maxMs?: number;
  /** Spread each delay uniformly over [delay/2, delay] so retries of many rows do not align. Default true. */
  jitter?: boolean;
}

/**
 * Returns the delay in ms before the next attempt, given the attempt (1-based) that just failed,
 * its error and the message (an `OutboundMessage` for the outbox, an `InboxMessage` for the relay
 * and pull workers).
 */
export type BackoffFunction<M = unknown> = (attempt: number, error: unknown, message: M) => number;

/** Exponential backoff of `retry.backoff`: `delay * factor^(attempt-1)`, at most `maxDelay`. */
export interface RetryBackoffOptions {
  /** Delay after the first failed attempt. Default `'1s'`. */
  delay?: Duration;
  /** Growth per attempt. Default 2. */
  factor?: number;
  /** Upper bound of one delay. Default `'5m'`. */
  maxDelay?: Duration;
  /** Spread each delay uniformly over [delay/2, delay] so retries of many rows do not align. Default true. */
  jitter?: boolean;
}

/**
 * The retry policy of a worker, in the shape Nest users know from queues:
 * - `false`: no retry; the first failure dead-letters the message;
 * - a number: at most this many attempts in all (`retry: 5` = the first attempt and 4 retries);
 * - an object: `attempts` (default 10), `backoff` (options or `(attempt, error, message) => ms`) and
 *   `retryIf(error, attempt, message)`, which dead-letters the message now when it returns false.
 *
 * A claim counts as an attempt, so a message whose publish crashes the process also uses them up.
 *
 * @example
 * retry: { attempts: 8, backoff: { delay: '2s', maxDelay: '10m' }, retryIf: (error) => !(error instanceof ValidationError) }
 */
export type RetryOption<M = unknown> = number | false | RetryPolicy<M>;

export interface RetryPolicy<M = unknown> {
  /** Attempts in all before the message is dead (a claim counts as one). Default 10. */
  attempts?: number;
  /** Delay before each retry. Default `{ delay: '1s', factor: 2, maxDelay: '5m', jitter: true }`. */
  backoff?: RetryBackoffOptions | BackoffFunction<M>;
  /** Return false to dead-letter the message now instead of retrying it. Default: retry every failure. */
  retryIf?: (error: unknown, attempt: number, message: M) => boolean;
}

export const DEFAULT_BACKOFF: Required<BackoffOptions> = { initialMs: 1000, factor: 2, maxMs: 300_000, jitter: true };

export function backoffFunction(options: Required<BackoffOptions>, random: () => number = Math.random): BackoffFunction<unknown> {
  return (attempt) => {
    const delay = Math.min(options.maxMs, options.initialMs * options.factor ** Math.max(0, attempt - 1));
    return Math.round(options.jitter ? delay / 2 + (random() * delay) / 2 : delay);
  };
}
