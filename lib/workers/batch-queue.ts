/**
 * Groups items handed in one at a time into batches of up to `size`, and runs at most
 * `concurrency` batches at once. Items handed in during one turn of the event loop (the claims of
 * one claim statement) form batches together: shared out over the free slots (`spread`: 50 items
 * and 5 free slots make 5 batches of 10), or each batch filled before the next (`fill`: 50 items
 * and a size of 20 make batches of 20, 20 and 10). A partial batch runs at the end of that turn
 * when a slot is free, or else takes in more items until one is.
 */
export class BatchQueue<T, R> {
  private readonly forming: { item: T; done: (result: R) => void; failed: (error: unknown) => void }[] = [];
  private running = 0;
  /** Slots kept after their run returned, by a call that timed out and still runs (`holdSlot`). */
  private held = 0;
  private scheduled = false;

  constructor(
    private readonly size: number,
    private readonly concurrency: number,
    /** Runs one batch and returns each item's result, in order; `holdSlot(until)` keeps its slot taken until `until` settles, even after it returned. */
    private readonly run: (items: T[], holdSlot: (until: Promise<unknown>) => void) => Promise<R[]>,
    /** Called when a kept slot is freed (its hung call ended). */
    private readonly onSlotFreed: () => void = () => undefined,
    /** `spread` for batches that run side by side (a pull batch); `fill` for fewer, fuller ones (a `publishBatch` call: a round trip each). */
    private readonly share: 'spread' | 'fill' = 'spread',
  ) {}

  /** Slots kept by calls that timed out and still run. */
  get stuckSlots(): number {
    return this.held;
  }

  /** Settles with `item`'s result when the batch that took it has run (rejects if that run threw). */
  add(item: T): Promise<R> {
    return new Promise((done, failed) => {
      this.forming.push({ item, done, failed });
      // Enough to fill every free slot (`spread`) or one batch (`fill`): no need to wait for the rest of the turn.
      const enough = this.share === 'fill' ? this.size : this.size * Math.max(1, this.concurrency - this.running);
      if (this.forming.length >= enough) this.dispatch();
      else if (!this.scheduled) {
        this.scheduled = true;
        queueMicrotask(() => {
          this.scheduled = false;
          this.dispatch();
        });
      }
    });
  }

  /** Takes back every item that waits for a slot: its `add` settles with what `giveBack` returns for it. Resolves to the items. */
  async takeWaiting(giveBack: (item: T) => Promise<R>): Promise<T[]> {
    const waiting = this.forming.splice(0);
    await Promise.all(waiting.map(async (entry) => entry.done(await giveBack(entry.item))));
    return waiting.map((entry) => entry.item);
  }

  private dispatch(): void {
    while (this.running < this.concurrency && this.forming.length > 0) {
      // `spread`: over the free slots rather than fill one batch first, so the batches run side by
      // side (a pull batch fills the room its claims leave with their aggregates' next rows).
      // `fill`: a full batch first, since each is a round trip (a publishBatch call).
      const share = this.share === 'fill' ? this.size : Math.ceil(this.forming.length / (this.concurrency - this.running));
      const group = this.forming.splice(0, Math.min(this.size, share));
      this.running++;
      let until: Promise<unknown> | undefined;
      const ran = this.run(
        group.map((entry) => entry.item),
        (settles) => {
          until = until ? Promise.allSettled([until, settles]) : settles;
        },
      );
      const release = () => {
        this.running--;
        this.dispatch();
      };
      const settled = () => {
        if (!until) return release();
        this.held++;
        void until.then(freed, freed);
      };
      const freed = () => {
        this.held--;
        release();
        this.onSlotFreed();
      };
      ran.then(
        (results) => {
          for (let i = 0; i < group.length; i++) group[i].done(results[i]);
          settled();
        },
        (error: unknown) => {
          for (const entry of group) entry.failed(error);
          settled();
        },
      );
    }
  }
}
