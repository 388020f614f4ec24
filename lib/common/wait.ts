/**
 * A sleep that `wake()` ends early. A wake-up that arrives while nobody sleeps is kept for the
 * next `sleep()`, which then returns at once: work announced during a claim is not missed.
 */
export class Waker {
  private pending?: { resolve: () => void; timer?: NodeJS.Timeout };
  private woken = false;

  sleep(ms: number): Promise<void> {
    if (this.woken) {
      this.woken = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const timer = Number.isFinite(ms) ? setTimeout(() => this.wake(), ms) : undefined;
      this.pending = { resolve, timer };
    });
  }

  wake(): void {
    const pending = this.pending;
    if (!pending) {
      this.woken = true;
      return;
    }
    this.pending = undefined;
    if (pending.timer) clearTimeout(pending.timer);
    pending.resolve();
  }
}

/** Resolves `true` when every promise settled within `ms`, `false` when the time ran out first. */
export async function settledWithin(promises: Promise<unknown>[], ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([Promise.allSettled(promises).then(() => true as const), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves at `at` (ms since the epoch), or rejects with `signal.reason` as soon as `signal` aborts. */
export function sleepUntil(at: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const abort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(
      () => {
        signal.removeEventListener('abort', abort);
        resolve();
      },
      Math.max(0, at - Date.now()),
    );
    signal.addEventListener('abort', abort, { once: true });
  });
}
