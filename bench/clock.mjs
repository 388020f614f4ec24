// One clock for the parent and the worker processes: wall-clock milliseconds with sub-millisecond
// resolution. `performance.timeOrigin` is taken from the system clock when each process starts,
// so timestamps of two processes on one machine can be subtracted.

export const now = () => performance.timeOrigin + performance.now();

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class DeadlineError extends Error {}

/** Resolves like `promise`, or rejects with a DeadlineError once the clock passes `deadline`. */
export function beforeDeadline(promise, deadline, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineError(`timed out while ${what}`)), Math.max(0, deadline - now()));
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
