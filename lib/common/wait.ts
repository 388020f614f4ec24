/** A sleep that `wake()` ends early. One sleeper at a time. */
export class Waker {
  private pending?: { resolve: () => void; timer?: NodeJS.Timeout };

  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = Number.isFinite(ms) ? setTimeout(() => this.wake(), ms) : undefined;
      this.pending = { resolve, timer };
    });
  }

  wake(): void {
    const pending = this.pending;
    if (!pending) return;
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
