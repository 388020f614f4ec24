// Worker runtime: the slot accounting of one claim loop (ClaimLoop): the claims it holds, the ones
// waiting for a concurrency slot, the slots taken by running steps and kept by timed-out work,
// and from those how many more claims the loop may take.

import type { LeaseKeeper } from '../lease/lease-keeper';
import type { WorkerClaim } from '../types/claims';

/** A step's concurrency slot. The loop frees it when the step returns, unless the step said otherwise. */
export interface WorkSlot {
  /** Gives the slot to the next claim now: what the step still does is not what `concurrency` bounds (the relay's batched forward). */
  release(): void;
  /**
   * Keeps the slot taken until `until` settles, even after the step returned: work that timed out
   * but ignores its abort signal (a publisher, a route, a handler) still runs, and `concurrency`
   * counts it until it really ends.
   */
  holdUntil(until: Promise<unknown>): void;
}

/**
 * A claim the loop holds, renewed by its keeper from the moment it is held: `waiting` for a slot,
 * `running` its step in one (it is then that step's `WorkSlot`), or `finishing`: its slot given
 * back while its step or the write of its outcome goes on.
 */
export class HeldClaim<C extends WorkerClaim<unknown>> implements WorkSlot {
  phase: 'waiting' | 'running' | 'finishing' = 'waiting';
  /** Its step's slot: taken while the step runs, kept by timed-out work that still runs (`holdUntil`), or given back. */
  slot: 'none' | 'taken' | 'kept' | 'free' = 'none';
  private released = false;
  /** Made only when someone waits for it (`runBatch`, shutdown): most claims are never waited for. */
  private donePromise?: Promise<void>;
  private letGo?: () => void;

  constructor(
    private readonly slots: WorkSlots<C>,
    readonly claim: C,
    readonly keeper: LeaseKeeper,
    /** It holds an ordering key (an outbox key, an inbox aggregate): finishing it can make another row claimable. */
    readonly keyed: boolean,
  ) {}

  /** Settles when the claim is let go: its outcome recorded, or given back unstarted. */
  get done(): Promise<void> {
    if (this.released) return Promise.resolve();
    this.donePromise ??= new Promise<void>((resolve) => {
      this.letGo = resolve;
    });
    return this.donePromise;
  }

  release(): void {
    this.slots.release(this);
  }

  holdUntil(until: Promise<unknown>): void {
    this.slots.keepUntil(this, until);
  }

  /** @internal */
  settle(): void {
    this.released = true;
    this.letGo?.();
  }
}

/** What the slot accounting tells its loop. */
export interface SlotEvents<C extends WorkerClaim<unknown>> {
  /** A slot is free for `held`: run its step. */
  start(held: HeldClaim<C>): void;
  /** A slot kept by timed-out work is free again: the loop may hold more claims. */
  keptSlotFreed(): void;
  /** A claim without a key gave back its slot: it stops counting against `batchSize`. */
  unkeyedFinishing(): void;
}

/**
 * The claims one loop holds, and its `concurrency` slots. A held claim counts against
 * `batchSize` until it is let go, except one without a key whose step gave back its slot (its
 * outcome's write overlaps the next claim: finishing it frees nothing another claim waits for);
 * of those at most `batchSize`, so writes that lag cannot let claims pile up (at most twice
 * `batchSize` are held).
 */
export class WorkSlots<C extends WorkerClaim<unknown>> {
  private readonly heldById = new Map<string, HeldClaim<C>>();
  private readonly waiting: HeldClaim<C>[] = [];
  /** Slots taken: steps running, and slots kept by timed-out work after its step returned. */
  private taken = 0;
  /** Of those, kept by timed-out work that still runs (`holdUntil`). */
  private kept = 0;
  /** Held claims in phase `finishing` that hold no key. */
  private finishingUnkeyed = 0;
  /** `startWaiting` is running (a start that frees a slot at once leaves the next start to it). */
  private starting = false;

  constructor(
    private readonly limits: { concurrency: number; batchSize: number },
    private readonly events: SlotEvents<C>,
  ) {}

  /** Claims held: waiting, running, or having their outcome written. */
  get size(): number {
    return this.heldById.size;
  }

  get(id: string): HeldClaim<C> | undefined {
    return this.heldById.get(id);
  }

  all(): HeldClaim<C>[] {
    return [...this.heldById.values()];
  }

  /** Held claims that count against `batchSize` (see the class comment). */
  get counted(): number {
    return this.heldById.size - Math.min(this.finishingUnkeyed, this.limits.batchSize);
  }

  /**
   * How many claims the loop may hold now: `batchSize` while every slot is free to run work;
   * less, in proportion, while `stuckElsewhere` slots (a batch pull handler's) or slots of its own
   * are kept by timed-out work that still runs; none when all are. A loop claims only what it can start.
   */
  capacity(stuckElsewhere: number): number {
    const { concurrency, batchSize } = this.limits;
    const stuck = this.kept + stuckElsewhere;
    const live = concurrency - stuck;
    if (live <= 0) return 0;
    if (stuck === 0) return batchSize;
    return Math.max(live, Math.floor((batchSize * live) / concurrency));
  }

  /** Holds a claim: it waits for a slot, and starts as soon as one is free. */
  hold(claim: C, keeper: LeaseKeeper, keyed: boolean): HeldClaim<C> {
    const held = new HeldClaim(this, claim, keeper, keyed);
    this.heldById.set(claim.id, held);
    this.waiting.push(held);
    this.startWaiting();
    return held;
  }

  /** The claims waiting for a slot, taken out of the queue (to give them back unstarted). */
  takeWaiting(): HeldClaim<C>[] {
    return this.waiting.splice(0);
  }

  /** Lets a claim go: its outcome is written (or will not be), or it was given back unstarted. */
  letGo(held: HeldClaim<C>): void {
    if (held.phase === 'finishing' && !held.keyed) this.finishingUnkeyed--;
    this.heldById.delete(held.claim.id);
    held.settle();
  }

  /** @internal The step gives its slot to the next claim. */
  release(held: HeldClaim<C>): void {
    if (held.slot !== 'taken') return;
    this.free(held);
    this.finish(held);
  }

  /** @internal Timed-out work still runs after its step returned: its slot stays taken until it ends. */
  keepUntil(held: HeldClaim<C>, until: Promise<unknown>): void {
    if (held.slot !== 'taken') return;
    held.slot = 'kept';
    this.kept++;
    this.finish(held);
    const free = () => this.free(held);
    void until.then(free, free);
  }

  /**
   * Starts waiting claims while slots are free. A step may give its slot back before it returns
   * (an outbox step that joins a `publishBatch` call does): that frees a slot inside `start`, and
   * this loop, not a nested one, starts the next claim, so the stack does not grow with the batch.
   */
  private startWaiting(): void {
    if (this.starting) return;
    this.starting = true;
    try {
      while (this.taken < this.limits.concurrency && this.waiting.length > 0) {
        const held = this.waiting.shift() as HeldClaim<C>;
        held.phase = 'running';
        held.slot = 'taken';
        this.taken++;
        this.events.start(held);
      }
    } finally {
      this.starting = false;
    }
  }

  private free(held: HeldClaim<C>): void {
    if (held.slot === 'free') return;
    const wasKept = held.slot === 'kept';
    held.slot = 'free';
    this.taken--;
    if (wasKept) {
      this.kept--;
      this.events.keptSlotFreed();
    }
    this.startWaiting();
  }

  private finish(held: HeldClaim<C>): void {
    if (held.phase !== 'running') return;
    held.phase = 'finishing';
    if (held.keyed) return;
    this.finishingUnkeyed++;
    this.events.unkeyedFinishing();
  }
}
