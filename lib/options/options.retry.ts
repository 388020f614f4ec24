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
import { messages } from '../texts/queuebox.messages';
import type { WorkerOptions } from '../types/options';
import { expectObject, integer, integerOption, rejectUnknownKeys } from './options.checks';
import { DAY_MS } from './options.defaults';
import type { ResolvedWorkerOptions } from './options.resolved';
import { keysOf, OLDER_BACKOFF_NAMES, RETRY_BACKOFF_OPTIONS, RETRY_OPTIONS, WORKER_OPTIONS } from './options.table';

// The retry policy of every worker and `@PullHandler`: `retry`, or the older `maxAttempts` and
// `backoff` it replaces.

const ALWAYS_RETRY = () => true;

/**
 * Resolves `retry` (or the older `maxAttempts` and `backoff`, which it replaces: still accepted,
 * each noted in `deprecations`) into attempts, a backoff function and a `retryIf` predicate.
 * `inherited` is what an absent option falls back to (a `@PullHandler`'s `pull.*` policy).
 */
export function resolveRetry(
  prefix: string,
  worker: { maxAttempts?: number; backoff?: BackoffOptions | BackoffFunction; retry?: RetryOption<never> },
  deprecations: string[],
  inherited?: Pick<ResolvedWorkerOptions, 'maxAttempts' | 'backoff' | 'retryIf'>,
  // biome-ignore lint/suspicious/noExplicitAny: see ResolvedWorkerOptions.
): { maxAttempts: number; backoff: BackoffFunction<any>; retryIf: ResolvedWorkerOptions['retryIf'] } {
  const { retry } = worker;
  if (retry === undefined) {
    for (const older of ['maxAttempts', 'backoff'] as const) {
      if (worker[older] !== undefined)
        deprecations.push(messages.optionDeprecated(`${prefix}.${older}`, `${prefix}.retry`, olderFormHint(older)));
    }
    return {
      maxAttempts: integerOption(`${prefix}.maxAttempts`, worker.maxAttempts, WORKER_OPTIONS.maxAttempts, inherited?.maxAttempts),
      backoff: worker.backoff === undefined && inherited ? inherited.backoff : resolveBackoff(`${prefix}.backoff`, worker.backoff),
      retryIf: inherited?.retryIf ?? ALWAYS_RETRY,
    };
  }
  const option = `${prefix}.retry`;
  for (const older of ['maxAttempts', 'backoff'] as const) {
    if (worker[older] !== undefined) throw new QueueBoxConfigError(`${prefix}.${older}`, messages.retryAndOlderOption(prefix, older));
  }
  const noBackoff = resolveBackoff(`${option}.backoff`, undefined);
  if (retry === false) return { maxAttempts: 1, backoff: noBackoff, retryIf: ALWAYS_RETRY };
  if (typeof retry === 'number')
    return { maxAttempts: integerOption(option, retry, RETRY_OPTIONS.attempts), backoff: noBackoff, retryIf: ALWAYS_RETRY };
  if (typeof retry !== 'object' || retry === null || Array.isArray(retry)) {
    throw new QueueBoxConfigError(option, messages.retryInvalid(option, retry));
  }
  rejectUnknownKeys(`${option}.`, retry, keysOf(RETRY_OPTIONS), { maxAttempts: 'attempts' });
  if (retry.retryIf !== undefined && typeof retry.retryIf !== 'function') {
    throw new QueueBoxConfigError(`${option}.retryIf`, messages.optionNotFunction(`${option}.retryIf`));
  }
  return {
    maxAttempts: integerOption(`${option}.attempts`, retry.attempts, RETRY_OPTIONS.attempts),
    backoff: resolveRetryBackoff(`${option}.backoff`, retry.backoff),
    retryIf: (retry.retryIf as ResolvedWorkerOptions['retryIf'] | undefined) ?? ALWAYS_RETRY,
  };
}

/** How the older option is written in `retry`. */
function olderFormHint(older: 'maxAttempts' | 'backoff'): string {
  return older === 'maxAttempts'
    ? 'retry: { attempts }'
    : "retry: { backoff: { delay: '1s', factor: 2, maxDelay: '5m', jitter: true } } (initialMs is delay, maxMs is maxDelay)";
}

function resolveRetryBackoff(option: string, backoff: RetryBackoffOptions | BackoffFunction<never> | undefined): BackoffFunction<unknown> {
  if (typeof backoff === 'function') return backoff as BackoffFunction<unknown>;
  const given = backoff ?? {};
  expectObject(option, given);
  rejectUnknownKeys(`${option}.`, given, keysOf(RETRY_BACKOFF_OPTIONS), OLDER_BACKOFF_NAMES);
  const initialMs =
    given.delay === undefined ? DEFAULT_BACKOFF.initialMs : parseDuration(`${option}.delay`, given.delay, { min: 0, max: DAY_MS });
  const maxMs =
    given.maxDelay === undefined
      ? Math.max(DEFAULT_BACKOFF.maxMs, initialMs)
      : parseDuration(`${option}.maxDelay`, given.maxDelay, { min: 0, max: 30 * DAY_MS });
  if (maxMs < initialMs) throw new QueueBoxConfigError(`${option}.maxDelay`, messages.retryMaxDelayBelowDelay(option, maxMs, initialMs));
  return resolveBackoff(option, { initialMs, maxMs, factor: given.factor, jitter: given.jitter });
}

/** The older `backoff` (`initialMs`, `factor`, `maxMs`, `jitter`), and the numbers `retry.backoff` resolves to. */
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
