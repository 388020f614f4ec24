// Worker runtime: the claim-and-dispatch loop every worker runs (claim a batch, renew each claim,
// run each claim's step with bounded concurrency, hand the step's outcome to the recorder, give
// back unstarted claims on shutdown). Run by WorkerShell for OutboxPoller, InboxRelay and PullWorker
// (one loop per handler); QueueBoxHealth reads its `WorkerLoopStatus`.

import type { Logger } from '@nestjs/common';
import type { SchedulerRegistry } from '@nestjs/schedule';
import { describeError } from '../common/errors';
import { settledWithin, Waker } from '../common/wait';
import { QueueBoxStateError } from '../errors/queuebox.errors';
import type { LeaseKeeper } from '../lease/lease-keeper';
import { messages } from '../queuebox.messages';
import type { WorkerClaim } from '../types/claims';
import type { DatabaseRecovery } from './database-recovery';
import type { OutcomeRecorder, Recorded, RecordListener, StepOutcome } from './outcome-recorder';

/**
 * Longest wait between two claims that failed (the database is down or unreachable). The wait
 * starts at twice `pollIntervalMs` and doubles per failure up to this; a recovery signal
 * (`DatabaseRecovery`) ends it early.
 */
export const MAX_CLAIM_RETRY_MS = 5_000;

export interface ClaimLoopOptions {
  /** Names the worker in logs and timers ("outbox poller", "inbox relay", ...). */
  name: string;
  /** Most steps running at once. */
  concurrency: number;
  /**
   * Most claims held at once (running, waiting for a slot, or having their outcome written); one
   * claim statement fetches up to this many. Up to this many more claims whose step gave back its
   * slot and that hold no other row (no ordering key) are not counted.
   */
  batchSize: number;
  pollIntervalMs: number;
  shutdownTimeoutMs: number;
  /** The reclaim step runs at start and then at this interval; omit when claims take expired rows themselves. */
  reclaimIntervalMs?: number;
  /** Name of the reclaim interval in the app's `SchedulerRegistry` (when `@nestjs/schedule` is set up). */
  reclaimTimerName?: string;
  /** Shared by the loops of one application: a claim that works again wakes the loops waiting for the database. */
  recovery?: DatabaseRecovery;
}

/** What a health check needs to know about one worker loop. */
export interface WorkerLoopStatus {
  /** "outbox poller", "inbox relay", "pull worker <source>". */
  name: string;
  running: boolean;
  /** When its claim statement last returned; undefined before the first claim. */
  lastCycleAt?: Date;
  /** Claims held now. */
  inFlight: number;
  /** Its last claim failed (database down or unreachable) and it retries: alive, but not claiming. */
  waitingForDatabase: boolean;
  /** When the claim statement running now was sent; undefined between claims. */
  claimingSince?: Date;
}

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

export interface ClaimLoopWork<C extends WorkerClaim<unknown>> {
  claim(limit: number): Promise<C[]>;
  /**
   * One claim's step: does the work and returns how it ended, for the recorder to write. The
   * keeper renews the claim until the step stops it; after `keeper.stop()`, check
   * `loop.abandoned` before a completing write of its own.
   */
  step(claim: C, keeper: LeaseKeeper, slot: WorkSlot): PromiseLike<StepOutcome<C>>;
  /** Starts renewing a claim; `batch` is the claims its claim statement returned (one renewal timer may serve them all). */
  keep(claim: C, batch: readonly C[]): LeaseKeeper;
  /**
   * The ordering key the claim holds (an outbox key, an inbox aggregate), or null. A claim with a
   * key keeps the key's other rows from being claimed until it is finished: it counts against
   * `batchSize` until then, and finishing it can make a row claimable. One without a key stops
   * counting once its step gave back its slot (the next claim overlaps the write of its outcome),
   * and finishing it frees nothing another claim waits for, unless it went back to `pending`.
   */
  keyOf(claim: C): string | null;
  /** The reclaim step of expired leases, for workers whose claims do not take expired rows. */
  reclaim?(): Promise<void>;
  /**
   * Concurrency slots, counted in claims, that the work's own scheduler gives to calls that timed
   * out and still run (a batch pull handler's batch slots; the loop counts its own slots kept by
   * `holdUntil` itself). The loop holds fewer claims while some are taken, and none while all are:
   * a claim it could not start would wait, renewed, for as long as the hung call runs.
   */
  stuckSlots?(): number;
  /**
   * Hands back the claims the work holds but has not started (their steps return `released`, so
   * they go back to `pending`, the attempt not counted); called while no slot is free. Resolves to them.
   */
  releaseUnstarted?(): Promise<C[]>;
}

type Phase = 'waiting' | 'running' | 'finishing';

/**
 * A claim the loop holds; while its step runs, also that step's concurrency slot (one object per
 * claim, where a slot used to be an object and four closures per step).
 */
class Held<C extends WorkerClaim<unknown>> implements WorkSlot, RecordListener {
  /** `waiting` for a slot; `running` its step in a slot; `finishing`: its slot given back, the step or its outcome still going. */
  phase: Phase = 'waiting';
  /** The step's slot: taken while it runs, kept by timed-out work that still runs (`holdUntil`), or free. */
  slot: 'none' | 'taken' | 'kept' | 'free' = 'none';
  private settled = false;
  /** Made only when someone waits for it (`runBatch`, shutdown): most claims are never waited for. */
  private donePromise?: Promise<void>;
  private resolveDone?: () => void;

  constructor(
    private readonly loop: ClaimLoop<C>,
    readonly claim: C,
    readonly keeper: LeaseKeeper,
  ) {}

  /** Settles when the outcome is recorded, or when the claim was given back unstarted. */
  get done(): Promise<void> {
    if (this.settled) return SETTLED;
    this.donePromise ??= new Promise<void>((resolve) => {
      this.resolveDone = resolve;
    });
    return this.donePromise;
  }

  settle(): void {
    this.settled = true;
    this.resolveDone?.();
  }

  release(): void {
    if (this.slot !== 'taken') return;
    this.loop.freeSlot(this);
    this.loop.finish(this);
  }

  /** Its outcome is written: the loop lets the claim go. */
  recorded(recorded: Recorded): void {
    this.loop.recorded(this, recorded === 'finished');
  }

  holdUntil(until: Promise<unknown>): void {
    if (this.slot !== 'taken') return;
    this.loop.keepSlot(this);
    void until.then(
      () => this.loop.freeSlot(this),
      () => this.loop.freeSlot(this),
    );
  }
}

const SETTLED: Promise<void> = Promise.resolve();

/**
 * The claim-and-dispatch loop every QueueBox worker shares. It holds up to `batchSize` claims
 * and runs up to `concurrency` of their steps at once: one claim statement fetches a batch, and it
 * claims again when half the batch is used, so workers never wait on a claim round trip while a
 * backlog lasts. With nothing to do it sleeps `pollIntervalMs` (or until woken).
 *
 * `stop()` stops claiming, gives back claims not yet started, and waits up to
 * `shutdownTimeoutMs` for work in flight; what is still running then is abandoned: its signal is
 * aborted, its outcome is not written, and the instance's deregistration releases its row.
 */
export class ClaimLoop<C extends WorkerClaim<unknown>> {
  private readonly held = new Map<string, Held<C>>();
  private readonly waiting: Held<C>[] = [];
  /** Slots taken: steps running, and slots kept by timed-out work after its step returned. */
  private slotsTaken = 0;
  /** Of those, kept by timed-out work that still runs (`holdUntil`). */
  private stuck = 0;
  /** Held claims in phase `finishing` that hold no key: not counted against `batchSize`. */
  private finishingUnkeyed = 0;
  /** The loop sleeps because enough claims are held (not because the last claim came back short). */
  private sleepingFull = false;
  /** Claiming stopped because every slot is kept by timed-out work (logged once per pause). */
  private pausedByStuckWork = false;
  private readonly waker = new Waker();
  private state: 'idle' | 'running' | 'stopping' | 'stopped' = 'idle';
  private loop?: Promise<void>;
  private reclaimTimer?: NodeJS.Timeout;
  private readonly timerName: string;
  private abandonedWork = false;
  private readonly refillAt: number;
  private lastCycle?: Date;
  private claimingSince?: Date;
  /** Consecutive failed claims; 0 while claims work. */
  private claimFailures = 0;
  private stopWaitingForDatabase?: () => void;
  private stopping?: Promise<void>;

  constructor(
    private readonly options: ClaimLoopOptions,
    private readonly work: ClaimLoopWork<C>,
    private readonly recorder: OutcomeRecorder<C>,
    private readonly logger: Logger,
    private readonly scheduler?: SchedulerRegistry,
  ) {
    this.timerName = options.reclaimTimerName ?? `queuebox:${options.name.replace(/\s+/g, '-')}:reclaim`;
    this.refillAt = refillPoint(options.batchSize);
  }

  /** True once shutdown stopped waiting: late work must leave its rows alone. */
  get abandoned(): boolean {
    return this.abandonedWork;
  }

  get running(): boolean {
    return this.state === 'running';
  }

  get status(): WorkerLoopStatus {
    return {
      name: this.options.name,
      running: this.running,
      lastCycleAt: this.lastCycle,
      inFlight: this.held.size,
      waitingForDatabase: this.claimFailures > 0,
      claimingSince: this.claimingSince,
    };
  }

  /** Claims held: running, waiting for a slot, or having their outcome written. */
  get inFlightCount(): number {
    return this.held.size;
  }

  /**
   * Held claims that count against `batchSize`: all but those finishing without a key, and of
   * those at most `batchSize` (writes that lag cannot let claims pile up: at most twice
   * `batchSize` are held).
   */
  private get counted(): number {
    return this.held.size - Math.min(this.finishingUnkeyed, this.options.batchSize);
  }

  /**
   * How many claims the loop may hold now: `batchSize` while every slot is free to run work;
   * less, in proportion, while slots are kept by timed-out work that still runs; none when all
   * are. A loop claims only what it can start.
   */
  private get capacity(): number {
    const stuck = this.stuck + (this.work.stuckSlots?.() ?? 0);
    const live = this.options.concurrency - stuck;
    if (live <= 0) return 0;
    if (stuck === 0) return this.options.batchSize;
    return Math.max(live, Math.floor((this.options.batchSize * live) / this.options.concurrency));
  }

  start(): void {
    if (this.state !== 'idle') return;
    this.state = 'running';
    const { reclaim } = this.work;
    if (reclaim && this.options.reclaimIntervalMs) {
      void reclaim.call(this.work);
      this.reclaimTimer = setInterval(() => void reclaim.call(this.work), this.options.reclaimIntervalMs);
      this.scheduler?.addInterval(this.timerName, this.reclaimTimer);
    }
    this.loop = this.run();
  }

  /** Claims at once instead of at the end of the current sleep (new work arrived). */
  wake(): void {
    this.waker.wake();
  }

  /**
   * Runs the reclaim step now, then claims at once: another replica ended leases (a dead
   * instance's) that the next reclaim would only find at its interval.
   */
  async reclaimNow(): Promise<void> {
    await this.work.reclaim?.();
    if (this.state === 'running') this.waker.wake();
  }

  /** Stops the loop; a second call while it stops waits for the same stop. */
  stop(): Promise<void> {
    if (this.state === 'stopping' && this.stopping) return this.stopping;
    if (this.state !== 'running') {
      this.state = 'stopped';
      return Promise.resolve();
    }
    this.stopping = this.drain();
    return this.stopping;
  }

  private async drain(): Promise<void> {
    this.state = 'stopping';
    this.stopWaitingForDatabase?.();
    if (this.reclaimTimer) {
      clearInterval(this.reclaimTimer);
      if (this.scheduler?.doesExist('interval', this.timerName)) this.scheduler.deleteInterval(this.timerName);
    }
    this.waker.wake();
    await this.loop;
    await this.releaseWaiting();
    const started = [...this.held.values()];
    if (started.length > 0) {
      this.logger.log(messages.shutdownWaiting(this.options.name, started.length, this.options.shutdownTimeoutMs));
      const finished = await settledWithin(
        started.map((held) => held.done),
        this.options.shutdownTimeoutMs,
      );
      if (!finished) {
        this.abandonedWork = true;
        this.logger.warn(messages.shutdownAbandoned(this.options.name, this.held.size));
        const reason = new QueueBoxStateError(messages.notRunning(this.options.name));
        for (const held of this.held.values()) held.keeper.abort(reason);
      }
    }
    this.state = 'stopped';
    this.logger.log(messages.shutdownDone(this.options.name));
  }

  /** Claims one batch and works through all of it. Returns how many rows it claimed. */
  async runOnce(): Promise<number> {
    return (await this.runBatch()).length;
  }

  /** Claims one batch and works through all of it. Returns the claims, so a caller can look up their outcome. */
  async runBatch(): Promise<C[]> {
    const claims = await this.work.claim(this.options.batchSize);
    this.lastCycle = new Date();
    await Promise.all(claims.map((claim) => this.hold(claim, claims).done));
    return claims;
  }

  private async run(): Promise<void> {
    while (this.state === 'running') {
      const capacity = this.capacity;
      if (capacity === 0) {
        // Every slot is kept by hung work: what waits for one goes back, for other replicas to take.
        this.lastCycle = new Date();
        await this.releaseWaiting();
        const handedBack = (await this.work.releaseUnstarted?.()) ?? [];
        await Promise.all(handedBack.map((claim) => this.held.get(claim.id)?.done));
        if (!this.pausedByStuckWork) this.logger.warn(messages.claimingPausedStuck(this.options.name));
        this.pausedByStuckWork = true;
        await this.waker.sleep(this.options.pollIntervalMs); // a freed slot wakes us sooner
        continue;
      }
      if (this.pausedByStuckWork) this.logger.log(messages.claimingResumed(this.options.name));
      this.pausedByStuckWork = false;
      const refillAt = capacity === this.options.batchSize ? this.refillAt : refillPoint(capacity);
      if (this.counted > refillAt) {
        // Busy is alive: a full loop waits for its work, not on the database.
        this.lastCycle = new Date();
        this.sleepingFull = true;
        await this.waker.sleep(Number.POSITIVE_INFINITY); // finishing work wakes us
        this.sleepingFull = false;
        // Work that settles in this turn of the event loop makes the next claim bigger.
        await new Promise((resolve) => setImmediate(resolve));
        continue;
      }
      const limit = capacity - this.counted;
      let claims: C[];
      this.claimingSince = new Date();
      try {
        claims = await this.work.claim(limit);
        this.lastCycle = new Date();
      } catch (error) {
        this.claimingSince = undefined;
        await this.waitForDatabase(error);
        continue;
      }
      this.claimingSince = undefined;
      if (this.claimFailures > 0) this.databaseBack();
      for (const claim of claims) this.hold(claim, claims);
      if (claims.length < limit) await this.waker.sleep(this.options.pollIntervalMs);
    }
  }

  /**
   * After a failed claim: waits twice `pollIntervalMs`, doubling per failure up to
   * `MAX_CLAIM_RETRY_MS`, or less when another loop or a health check sees the database answer.
   */
  private async waitForDatabase(error: unknown): Promise<void> {
    this.claimFailures++;
    const retryMs = Math.min(MAX_CLAIM_RETRY_MS, this.options.pollIntervalMs * 2 ** Math.min(this.claimFailures, 10));
    this.logger.error(messages.claimFailed(this.options.name, describeError(error), retryMs));
    this.stopWaitingForDatabase?.();
    this.stopWaitingForDatabase = this.options.recovery?.waitFor(() => this.waker.wake());
    await this.waker.sleep(retryMs);
  }

  /** The first claim that worked after failures: the database is back for the other loops too. */
  private databaseBack(): void {
    this.logger.log(messages.claimRecovered(this.options.name, this.claimFailures));
    this.claimFailures = 0;
    this.stopWaitingForDatabase?.();
    this.stopWaitingForDatabase = undefined;
    this.options.recovery?.recovered();
  }

  /** Takes a claim in: renewed from now on, started as soon as a slot is free. */
  private hold(claim: C, batch: readonly C[]): Held<C> {
    const held = new Held(this, claim, this.work.keep(claim, batch));
    this.held.set(claim.id, held);
    this.waiting.push(held);
    this.startWaiting();
    return held;
  }

  private startWaiting(): void {
    while (this.slotsTaken < this.options.concurrency && this.waiting.length > 0) {
      this.runStep(this.waiting.shift() as Held<C>);
    }
  }

  /**
   * Runs one claim's step in a slot (the `Held` is the step's `WorkSlot`), then has its outcome
   * recorded: a promise chain, not an async function (whose frame and awaits cost about 0.7 KB a
   * message).
   */
  private runStep(held: Held<C>): void {
    held.phase = 'running';
    this.slotsTaken++;
    held.slot = 'taken';
    let step: PromiseLike<StepOutcome<C>>;
    try {
      step = this.work.step(held.claim, held.keeper, held);
    } catch (error) {
      step = Promise.reject(error);
    }
    step.then(
      (outcome) => this.stepEnded(held, outcome),
      (error: unknown) => {
        this.logger.error(messages.workFailed(this.options.name, held.claim.id, describeError(error)));
        this.stepEnded(held, undefined);
      },
    );
  }

  private stepEnded(held: Held<C>, outcome: StepOutcome<C> | undefined): void {
    held.release(); // the outcome is written outside the slot
    if (!outcome || this.abandonedWork) {
      this.recorded(held, false);
      return;
    }
    this.recorder.recordFor(held.claim, outcome, held);
  }

  /** @internal The claim's outcome is written (or will not be): it is no longer held. */
  recorded(held: Held<C>, finished: boolean): void {
    if (this.work.keyOf(held.claim) === null) this.finishingUnkeyed--;
    this.held.delete(held.claim.id);
    held.settle();
    if (this.state !== 'running') return;
    // Finishing a keyed row frees its key; a row that went back to pending can be claimed again.
    if (this.sleepingFull || this.work.keyOf(held.claim) !== null || !finished) this.waker.wake();
  }

  /** @internal The step's slot is free again (its step gave it back, or the timed-out work it kept ended). */
  freeSlot(held: Held<C>): void {
    if (held.slot === 'free') return;
    if (held.slot === 'kept') {
      this.stuck--;
      if (this.state === 'running') this.waker.wake();
    }
    held.slot = 'free';
    this.slotsTaken--;
    this.startWaiting();
  }

  /** @internal Timed-out work still runs after its step returned: its slot stays taken until it ends. */
  keepSlot(held: Held<C>): void {
    held.slot = 'kept';
    this.stuck++;
    this.finish(held);
  }

  /** @internal The step gave back its slot: a claim without a key stops counting against `batchSize`. */
  finish(held: Held<C>): void {
    if (held.phase !== 'running') return;
    held.phase = 'finishing';
    if (this.work.keyOf(held.claim) !== null) return;
    this.finishingUnkeyed++;
    if (this.sleepingFull && this.state === 'running') this.waker.wake();
  }

  /** Claims that never started go back to `pending` at once instead of waiting for their lease (shutdown, or every slot stuck). */
  private async releaseWaiting(): Promise<void> {
    const unstarted = this.waiting.splice(0);
    await Promise.all(
      unstarted.map(async (held) => {
        await held.keeper.stop();
        await this.recorder.record(held.claim, { kind: 'released' });
        this.held.delete(held.claim.id);
        held.settle();
      }),
    );
  }
}

/** Claim again once half of `batchSize` is used (at once when the batch is one row). */
function refillPoint(batchSize: number): number {
  return batchSize - Math.max(1, Math.floor(batchSize / 2));
}
