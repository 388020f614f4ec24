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
 * or while the batches in flight run, goes into the next batch (up to `maxBatch` items), and
 * `runBatch` handles the batch at once. Under load that is one round trip for many items; alone, an
 * item waits for nothing but its own batch. `runBatch` returns one outcome per item, in order; when
 * it throws, every item of that batch is rejected with the error.
 *
 * Up to `maxInFlight` batches run at once (default 1: each waits for the one before). With more,
 * items added while one batch runs start the next at once; only when all are busy do they wait,
 * gathering into the batch that starts when one ends.
 */
export class TurnBatcher<Item, Outcome> {
  private queue: BatchWaiter<Item, Outcome>[] = [];
  /** Flushes running: each takes batches off the queue until it is empty. */
  private flushes = 0;
  /** A flush is to start at the end of this turn. */
  private scheduled = false;

  constructor(
    private readonly maxBatch: number,
    private readonly runBatch: (items: Item[]) => Promise<Outcome[]>,
    private readonly maxInFlight = 1,
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
    if (this.scheduled || this.flushes >= this.maxInFlight) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      // A running flush may have taken the queue meanwhile.
      if (this.queue.length > 0) void this.flush();
    });
  }

  private async flush(): Promise<void> {
    this.flushes++;
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      try {
        const outcomes = await this.runBatch(batch.map((waiter) => waiter.item));
        for (let i = 0; i < batch.length; i++) batch[i].resolve(outcomes[i]);
      } catch (error) {
        for (const waiter of batch) waiter.reject(error);
      }
    }
    this.flushes--;
  }
}
