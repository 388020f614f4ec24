/** Exponential backoff between attempts. */
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

/** Returns the delay in ms before the next attempt, given the attempt (1-based) that just failed. */
export type BackoffFunction = (attempt: number, error: unknown) => number;

export const DEFAULT_BACKOFF: Required<BackoffOptions> = { initialMs: 1000, factor: 2, maxMs: 300_000, jitter: true };

export function backoffFunction(options: Required<BackoffOptions>, random: () => number = Math.random): BackoffFunction {
  return (attempt) => {
    const delay = Math.min(options.maxMs, options.initialMs * options.factor ** Math.max(0, attempt - 1));
    return Math.round(options.jitter ? delay / 2 + (random() * delay) / 2 : delay);
  };
}
