import {
  type BackoffFunction,
  type BackoffOptions,
  backoffFunction,
  DEFAULT_BACKOFF,
  type RetryBackoffOptions,
  type RetryOption,
} from '../common/backoff';
import { parseDuration } from '../common/duration';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { messages } from '../queuebox.messages';
import { expectObject, integer, rejectUnknownKeys } from './options.checks';
import { DAY_MS, DEFAULT_MAX_ATTEMPTS } from './options.defaults';
import type { ResolvedWorkerOptions } from './options.resolver';
import type { WorkerOptions } from './options.types';

// The retry policy of every worker and `@PullHandler`: `retry`, or the older `maxAttempts` and
// `backoff` it replaces.

const ALWAYS_RETRY = () => true;

/**
 * Resolves `retry` (or the older `maxAttempts` and `backoff`, which it replaces) into attempts,
 * a backoff function and a `retryIf` predicate.
 */
export function resolveRetry(
  prefix: string,
  worker: { maxAttempts?: number; backoff?: BackoffOptions | BackoffFunction; retry?: RetryOption<never> },
  // biome-ignore lint/suspicious/noExplicitAny: see ResolvedWorkerOptions.
): { maxAttempts: number; backoff: BackoffFunction<any>; retryIf: ResolvedWorkerOptions['retryIf'] } {
  const { retry } = worker;
  if (retry === undefined) {
    return {
      maxAttempts: integer(`${prefix}.maxAttempts`, worker.maxAttempts, DEFAULT_MAX_ATTEMPTS, 1, 1_000_000),
      backoff: resolveBackoff(`${prefix}.backoff`, worker.backoff),
      retryIf: ALWAYS_RETRY,
    };
  }
  const option = `${prefix}.retry`;
  for (const older of ['maxAttempts', 'backoff'] as const) {
    if (worker[older] !== undefined) throw new QueueBoxConfigError(`${prefix}.${older}`, messages.retryAndOlderOption(prefix, older));
  }
  const noBackoff = resolveBackoff(`${option}.backoff`, undefined);
  if (retry === false) return { maxAttempts: 1, backoff: noBackoff, retryIf: ALWAYS_RETRY };
  if (typeof retry === 'number')
    return { maxAttempts: integer(option, retry, DEFAULT_MAX_ATTEMPTS, 1, 1_000_000), backoff: noBackoff, retryIf: ALWAYS_RETRY };
  if (typeof retry !== 'object' || retry === null || Array.isArray(retry)) {
    throw new QueueBoxConfigError(option, messages.retryInvalid(option, retry));
  }
  rejectUnknownKeys(`${option}.`, retry, ['attempts', 'backoff', 'retryIf']);
  if (retry.retryIf !== undefined && typeof retry.retryIf !== 'function') {
    throw new QueueBoxConfigError(`${option}.retryIf`, messages.optionNotFunction(`${option}.retryIf`));
  }
  return {
    maxAttempts: integer(`${option}.attempts`, retry.attempts, DEFAULT_MAX_ATTEMPTS, 1, 1_000_000),
    backoff: resolveRetryBackoff(`${option}.backoff`, retry.backoff),
    retryIf: (retry.retryIf as ResolvedWorkerOptions['retryIf'] | undefined) ?? ALWAYS_RETRY,
  };
}

function resolveRetryBackoff(option: string, backoff: RetryBackoffOptions | BackoffFunction<never> | undefined): BackoffFunction<unknown> {
  if (typeof backoff === 'function') return backoff as BackoffFunction<unknown>;
  const given = backoff ?? {};
  expectObject(option, given);
  rejectUnknownKeys(`${option}.`, given, ['delay', 'factor', 'maxDelay', 'jitter']);
  const initialMs =
    given.delay === undefined ? DEFAULT_BACKOFF.initialMs : parseDuration(`${option}.delay`, given.delay, { min: 0, max: DAY_MS });
  const maxMs =
    given.maxDelay === undefined
      ? Math.max(DEFAULT_BACKOFF.maxMs, initialMs)
      : parseDuration(`${option}.maxDelay`, given.maxDelay, { min: 0, max: 30 * DAY_MS });
  if (maxMs < initialMs) throw new QueueBoxConfigError(`${option}.maxDelay`, messages.retryMaxDelayBelowDelay(option, maxMs, initialMs));
  return resolveBackoff(option, { initialMs, maxMs, factor: given.factor, jitter: given.jitter });
}

export function resolveBackoff(option: string, backoff: WorkerOptions['backoff']): BackoffFunction {
  if (typeof backoff === 'function') return backoff;
  const given = backoff ?? {};
  expectObject(option, given);
  rejectUnknownKeys(`${option}.`, given, Object.keys(DEFAULT_BACKOFF));
  const jitter = given.jitter ?? DEFAULT_BACKOFF.jitter;
  if (typeof jitter !== 'boolean') throw new QueueBoxConfigError(`${option}.jitter`, messages.optionNotBoolean(`${option}.jitter`, jitter));
  const factor = given.factor ?? DEFAULT_BACKOFF.factor;
  if (typeof factor !== 'number' || !Number.isFinite(factor) || factor < 1 || factor > 100) {
    throw new QueueBoxConfigError(`${option}.factor`, messages.optionOutOfRange(`${option}.factor`, factor, 1, 100));
  }
  const initialMs = integer(`${option}.initialMs`, given.initialMs, DEFAULT_BACKOFF.initialMs, 0, DAY_MS);
  const maxMs = integer(`${option}.maxMs`, given.maxMs, DEFAULT_BACKOFF.maxMs, 0, 30 * DAY_MS);
  if (maxMs < initialMs) throw new QueueBoxConfigError(`${option}.maxMs`, messages.backoffMaxBelowInitial(option, maxMs, initialMs));
  return backoffFunction({ initialMs, factor, maxMs, jitter });
}
