// Worker runtime: the claim-and-dispatch loop every worker runs (claim a batch, renew each claim,
// work on it with bounded concurrency, give back unstarted claims on shutdown). Used by OutboxPoller
// and InboxRelay (through LoopWorker) and by PullWorker (one loop per handler); QueueBoxHealth
// reads its `WorkerLoopStatus`.

import type { Logger } from '@nestjs/common';
import type { SchedulerRegistry } from '@nestjs/schedule';
import { describeError } from '../common/errors';
import { settledWithin, Waker } from '../common/wait';
import { QueueBoxStateError } from '../errors/queuebox.errors';
import type { LeaseService } from '../lease/lease.service';
import type { Claim } from '../lease/lease.types';
import { messages } from '../queuebox.messages';
import type { DatabaseRecovery } from './database-recovery';
import type { LeaseKeeper } from './lease-keeper';

/**
 * Longest wait between two claims that failed (the database is down or unreachable). The wait
 * starts at twice `pollIntervalMs` and doubles per failure up to this; a recovery signal
 * (`DatabaseRecovery`) ends it early.
 */
export const MAX_CLAIM_RETRY_MS = 5_000;

export interface ClaimLoopOptions {
  /** Names the worker in logs and timers ("outbox poller", "inbox relay", ...). */
  name: string;
  /** Most claims worked on at once. */
  concurrency: number;
  /**
   * Most claims held at once (working, waiting for a slot, or writing their outcome); one claim
   * statement fetches up to this many. Up to this many more claims that only write their outcome
   * and hold no other row (`holdsOthers`) are not counted.
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

export interface ClaimLoopWork<C extends Claim> {
  claim(limit: number): Promise<C[]>;
  /**
   * Handles one claim. The keeper renews it; after `keeper.stop()`, check `loop.abandoned` before writing.
   * `yieldSlot()` gives its concurrency slot to the next claim before the work is done (the outbox
   * calls it once the publish settled: the finishing write is not a publish, and waiting for it
   * held a slot for a round trip per message). The claim stays held, and counted in `batchSize`,
   * until `process` settles. `yieldSlot(until)` instead keeps the slot taken until `until`
   * settles, even after `process` did: work that timed out but ignores its abort signal (a
   * publisher, a handler) still runs, and `concurrency` counts it until it really ends.
   */
  process(claim: C, keeper: LeaseKeeper, yieldSlot: (until?: Promise<unknown>) => void): Promise<void>;
  reclaim?(): Promise<void>;
  /** Starts renewing a claim; default `lease.keep(claim)`. */
  keep?(claim: C): LeaseKeeper;
  /**
   * Whether finishing `claim` can make rows claimable that the last claim could not take (a row
   * of a key frees its key; a retried row is pending again). Default true. When false, and the
   * loop sleeps because the outbox looked empty, the loop is not woken for a claim that would find
   * nothing: new rows wake it anyway (notifications, the poll).
   */
  unblocks?(claim: C): boolean;
  /**
   * Whether `claim`, until it is finished, keeps other rows from being claimed (a row of a key
   * holds its key). Default true. A claim that holds nothing stops counting against `batchSize`
   * once its work gave back its slot (`yieldSlot`), so the next claim overlaps the write of its
   * outcome; one that holds a key keeps counting, since a claim made over it would find its key
   * still in flight.
   */
  holdsOthers?(claim: C): boolean;
  /**
   * Concurrency slots, counted in claims, that the work's own scheduler gives to calls that timed
   * out and still run (a batch pull handler's batch slots; the loop counts its own slots held by
   * `yieldSlot(until)` itself). The loop holds fewer claims while some are taken, and none while
   * all are: a claim it could not start would wait, renewed, for as long as the hung call runs.
   */
  stuckSlots?(): number;
  /** Gives back (`pending`, attempt not counted) the claims the work holds but has not started: called while no slot is free. */
  releaseUnstarted?(): Promise<void>;
}

interface Held<C> {
  claim: C;
  keeper: LeaseKeeper;
  started: boolean;
  /** Settles when the work is done, or when the claim was given back unstarted. */
  done: Promise<void>;
  settle: () => void;
}

/**
 * The claim-and-dispatch loop every QueueBox worker shares. It holds up to `batchSize` claims
 * and works on up to `concurrency` of them at once: one claim statement fetches a batch, and it
 * claims again when half the batch is used, so workers never wait on a claim round trip while a
 * backlog lasts. With nothing to do it sleeps `pollIntervalMs` (or until woken).
 *
 * `stop()` stops claiming, gives back claims not yet started, and waits up to
 * `shutdownTimeoutMs` for work in flight; what is still running then is abandoned (its signal is
 * aborted and its row stays `processing` until the lease expires).
 */
export class ClaimLoop<C extends Claim> {
  private readonly held = new Map<string, Held<C>>();
  private readonly waiting: Held<C>[] = [];
  private working = 0;
  /** Concurrency slots kept by work that timed out and still runs (`yieldSlot(until)`). */
  private stuck = 0;
  /** Claiming stopped because every slot is kept by such work (logged once per pause). */
  private pausedByStuckWork = false;
  /** Held claims that gave back their slot, hold no other row (`holdsOthers`) and only write their outcome: not counted by refills. */
  private finishing = 0;
  /** The loop sleeps because enough claims are waiting or working (not because the last claim came back short). */
  private sleepingFull = false;
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

  constructor(
    private readonly options: ClaimLoopOptions,
    private readonly work: ClaimLoopWork<C>,
    private readonly lease: LeaseService,
    private readonly logger: Logger,
    private readonly scheduler?: SchedulerRegistry,
  ) {
    this.timerName = options.reclaimTimerName ?? `queuebox:${options.name.replace(/\s+/g, '-')}:reclaim`;
    // Claim again once half the batch is used (at once when the batch is one row).
    this.refillAt = options.batchSize - Math.max(1, Math.floor(options.batchSize / 2));
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

  /** Claims held: working, waiting for a slot, or writing their outcome. */
  get inFlightCount(): number {
    return this.held.size;
  }

  /**
   * Held claims that count against `batchSize`: all but those only writing an outcome that holds
   * no other row, and of those at most `batchSize` (writes that lag cannot let claims pile up:
   * at most twice `batchSize` are held).
   */
  private get counted(): number {
    return this.held.size - Math.min(this.finishing, this.options.batchSize);
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

  async stop(): Promise<void> {
    if (this.state !== 'running') {
      this.state = 'stopped';
      return;
    }
    this.state = 'stopping';
    this.stopWaitingForDatabase?.();
    if (this.reclaimTimer) {
      clearInterval(this.reclaimTimer);
      if (this.scheduler?.doesExist('interval', this.timerName)) this.scheduler.deleteInterval(this.timerName);
    }
    this.waker.wake();
    await this.loop;
    await this.releaseWaiting();
    const started = [...this.held.values()].filter((held) => held.started);
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
    await Promise.all(claims.map((claim) => this.hold(claim).done));
    return claims;
  }

  /**
   * How many claims the loop may hold now: `batchSize` while every slot is free to run work;
   * less, in proportion, while slots are kept by timed-out work that still runs (stuck); none
   * when all are. A loop claims only what it can start.
   */
  private get capacity(): number {
    const stuck = this.stuck + (this.work.stuckSlots?.() ?? 0);
    const live = this.options.concurrency - stuck;
    if (live <= 0) return 0;
    if (stuck === 0) return this.options.batchSize;
    return Math.max(live, Math.floor((this.options.batchSize * live) / this.options.concurrency));
  }

  private async run(): Promise<void> {
    while (this.state === 'running') {
      const capacity = this.capacity;
      if (capacity === 0) {
        // Every slot is kept by hung work: what waits for one goes back, for other replicas to take.
        if (!this.pausedByStuckWork) this.logger.warn(messages.claimingPausedStuck(this.options.name));
        this.pausedByStuckWork = true;
        this.lastCycle = new Date();
        await this.releaseWaiting();
        await this.work.releaseUnstarted?.();
        await this.waker.sleep(this.options.pollIntervalMs); // a freed slot wakes us sooner
        continue;
      }
      if (this.pausedByStuckWork) this.logger.log(messages.claimingResumed(this.options.name));
      this.pausedByStuckWork = false;
      const refillAt = capacity === this.options.batchSize ? this.refillAt : capacity - Math.max(1, Math.floor(capacity / 2));
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
      for (const claim of claims) this.hold(claim);
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
  private hold(claim: C): Held<C> {
    let settle!: () => void;
    const done = new Promise<void>((resolve) => {
      settle = resolve;
    });
    const keeper = this.work.keep ? this.work.keep(claim) : this.lease.keep(claim);
    const held: Held<C> = { claim, keeper, started: false, done, settle };
    this.held.set(claim.id, held);
    this.waiting.push(held);
    this.startWaiting();
    return held;
  }

  private startWaiting(): void {
    while (this.working < this.options.concurrency && this.waiting.length > 0) {
      const held = this.waiting.shift() as Held<C>;
      held.started = true;
      this.working++;
      let slotHeld = true;
      let finishing = false;
      let processed = false;
      let slotHeldUntil = false;
      const release = () => {
        if (!slotHeld) return;
        slotHeld = false;
        this.working--;
        if (slotHeldUntil) {
          this.stuck--;
          if (this.state === 'running') this.waker.wake();
        }
        this.startWaiting();
        if (!processed && this.work.holdsOthers?.(held.claim) === false) {
          finishing = true;
          this.finishing++;
          if (this.sleepingFull && this.state === 'running') this.waker.wake();
        }
      };
      const yieldSlot = (until?: Promise<unknown>) => {
        if (until === undefined) return release();
        if (slotHeldUntil || !slotHeld) return;
        slotHeldUntil = true;
        this.stuck++;
        void until.then(release, release);
      };
      this.work
        .process(held.claim, held.keeper, yieldSlot)
        .catch((error) => this.logger.error(messages.workFailed(this.options.name, held.claim.id, describeError(error))))
        .finally(() => {
          processed = true;
          if (!slotHeldUntil) release();
          if (finishing) this.finishing--;
          this.held.delete(held.claim.id);
          held.settle();
          if (this.state !== 'running') return;
          if (this.sleepingFull || (this.work.unblocks?.(held.claim) ?? true)) this.waker.wake();
        });
    }
  }

  /** On shutdown, claims that never started go back to `pending` at once instead of waiting for their lease. */
  private async releaseWaiting(): Promise<void> {
    const unstarted = this.waiting.splice(0);
    await Promise.all(
      unstarted.map(async (held) => {
        await held.keeper.stop();
        this.held.delete(held.claim.id);
        await this.lease
          .release(held.claim)
          .catch((error) => this.logger.warn(messages.releaseFailed(held.claim.id, describeError(error))));
        held.settle();
      }),
    );
  }
}
