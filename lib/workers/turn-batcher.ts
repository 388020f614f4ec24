// Worker runtime: batching by turn of the event loop. Used by BatchCompleter (outbox completions)
// and ForwardBatcher (the relay's forwards).

/** An item handed to a `TurnBatcher`, told once its batch has run: its outcome, or the batch's error. */
export interface BatchWaiter<Item, Outcome> {
  readonly item: Item;
  resolve(outcome: Outcome): void;
  reject(error: unknown): void;
}

/**
 * Groups work handed in one item at a time: every item added during one turn of the event loop,
 * or while the previous batch runs, goes into the next batch (up to `maxBatch` items), and
 * `runBatch` handles the batch at once. Under load that is one round trip for many items; alone, an
 * item waits for nothing but its own batch. `runBatch` returns one outcome per item, in order; when
 * it throws, every item of that batch is rejected with the error.
 */
export class TurnBatcher<Item, Outcome> {
  private queue: BatchWaiter<Item, Outcome>[] = [];
  private flushing = false;

  constructor(
    private readonly maxBatch: number,
    private readonly runBatch: (items: Item[]) => Promise<Outcome[]>,
  ) {}

  /** Settles with this item's outcome once its batch has run. */
  add(item: Item): Promise<Outcome> {
    return new Promise((resolve, reject) => this.enqueue({ item, resolve, reject }));
  }

  /**
   * Like `add`, but tells `waiter` instead of returning a promise: a caller that already has an
   * object per item (the outbox's completions) makes nothing more per item.
   */
  enqueue(waiter: BatchWaiter<Item, Outcome>): void {
    this.queue.push(waiter);
    if (!this.flushing) {
      this.flushing = true;
      setImmediate(() => void this.flush());
    }
  }

  private async flush(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      try {
        const outcomes = await this.runBatch(batch.map((waiter) => waiter.item));
        for (let i = 0; i < batch.length; i++) batch[i].resolve(outcomes[i]);
      } catch (error) {
        for (const waiter of batch) waiter.reject(error);
      }
    }
    this.flushing = false;
  }
}
