// Worker runtime: the claim-and-dispatch loop every worker runs (claim a batch, renew each claim,
// run each claim's step with bounded concurrency, hand the step's outcome to the recorder, give
// back unstarted claims on shutdown). Run by WorkerShell for OutboxPoller, InboxRelay and PullWorker
// (one loop per handler); QueueBoxHealth reads its `WorkerLoopStatus`. Its slot accounting is
// WorkSlots, its reclaim timer ReclaimTimer, its retry wait after failed claims ClaimFailures.

import type { Logger } from '@nestjs/common';
import type { SchedulerRegistry } from '@nestjs/schedule';
import { describeError } from '../common/errors';
import { settledWithin, Waker } from '../common/wait';
import { QueueBoxStateError } from '../errors/queuebox.errors';
import type { LeaseKeeper } from '../lease/lease-keeper';
import { messages } from '../texts/queuebox.messages';
import type { WorkerClaim } from '../types/claims';
import { ClaimFailures, type DatabaseRecovery } from './database-recovery';
import type { OutcomeRecorder, StepOutcome } from './outcome-recorder';
import { ReclaimTimer } from './reclaim-timer';
import { type HeldClaim, type WorkSlot, WorkSlots } from './work-slots';

export type { WorkSlot } from './work-slots';

export interface ClaimLoopOptions {
  /** Names the worker in logs and timers ("outbox poller", "inbox relay", ...). */
  name: string;
  /** Most steps running at once. */
  concurrency: number;
  /** Most claims held at once (see WorkSlots); one claim statement fetches up to this many. */
  batchSize: number;
  /**
   * Most rows one claim statement asks for, when fewer than `batchSize` (the relay's half: see
   * RelayClaims). A claim that returns this many is not short: the loop claims again at once.
   */
  claimLimit?: number;
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

/** A worker's part of the loop: how it claims, keeps and works one claim. */
export interface ClaimLoopWork<C extends WorkerClaim<unknown>> {
  claim(limit: number): Promise<C[]>;
  /**
   * One claim's step: does the work and resolves to how it ended, for the recorder to write. The
   * keeper renews the claim until the step stops it; after `keeper.stop()`, check
   * `loop.abandoned` before a completing write of its own.
   */
  step(claim: C, keeper: LeaseKeeper, slot: WorkSlot): Promise<StepOutcome<C>>;
  /** Starts renewing a claim; `batch` is the claims its claim statement returned (one renewal timer may serve them all). */
  keep(claim: C, batch: readonly C[]): LeaseKeeper;
  /**
   * The ordering key the claim holds (an outbox key, an inbox aggregate), or null. A claim with a
   * key keeps the key's other rows from being claimed until it is finished; finishing one can
   * make a row claimable (see WorkSlots for how claims count).
   */
  keyOf(claim: C): string | null;
  /** The reclaim step of expired leases, for workers whose claims do not take expired rows. */
  reclaim?(): Promise<void>;
  /** A claim the loop gave back unstarted (shutdown, or every slot stuck): its step will not run. */
  released?(claim: C): void;
}

/**
 * Steps that run in batches of the work's own scheduler (a batch pull handler's `BatchQueue`):
 * the loop must know the slots its timed-out batches keep, and may take back the claims it holds
 * but has not started.
 */
export interface BatchedSteps<C extends WorkerClaim<unknown>> {
  /**
   * Concurrency slots, counted in claims, kept by batches that timed out and still run. The loop
   * holds fewer claims while some are, and none while all are: a claim it could not start would
   * wait, renewed, for as long as the hung call runs.
   */
  stuckSlots(): number;
  /** Hands back the claims not started yet (their steps return `released`); called while no slot is free. Resolves to them. */
  releaseUnstarted(): Promise<C[]>;
}

/**
 * The claim-and-dispatch loop every QueueBox worker shares. It holds up to `batchSize` claims
 * and runs up to `concurrency` of their steps at once: one claim statement fetches a batch, and it
 * claims again when half the batch is used, so workers never wait on a claim round trip while a
 * backlog lasts. With nothing to do it sleeps `pollIntervalMs` (or until woken).
 *
 * `stop()` stops claiming, gives back claims not yet started, and waits up to
 * `shutdownTimeoutMs` for work in flight; what still runs then is abandoned (its signal aborted;
 * the instance's deregistration releases its row).
 */
export class ClaimLoop<C extends WorkerClaim<unknown>> {
  private readonly slots: WorkSlots<C>;
  /** Most rows one claim statement asks for: `batchSize`, or `claimLimit` when smaller. */
  private readonly perClaim: number;
  private readonly failures: ClaimFailures;
  private readonly reclaimTimer?: ReclaimTimer;
  private readonly waker = new Waker();
  private state: 'idle' | 'running' | 'stopping' | 'stopped' = 'idle';
  private loop?: Promise<void>;
  private stopping?: Promise<void>;
  private abandonedWork = false;
  /** The loop sleeps because enough claims are held (not because the last claim came back short). */
  private sleepingFull = false;
  /** Claiming stopped because every slot is kept by timed-out work (logged once per pause). */
  private pausedByStuckWork = false;
  private lastCycle?: Date;
  private claimingSince?: Date;

  constructor(
    private readonly options: ClaimLoopOptions,
    private readonly work: ClaimLoopWork<C>,
    private readonly recorder: OutcomeRecorder<C>,
    private readonly logger: Logger,
    scheduler?: SchedulerRegistry,
    private readonly batched?: BatchedSteps<C>,
  ) {
    this.slots = new WorkSlots(options, {
      start: (held) => void this.runStep(held),
      keptSlotFreed: () => this.wakeIfRunning(),
      unkeyedFinishing: () => {
        if (this.sleepingFull) this.wakeIfRunning();
      },
    });
    this.perClaim = Math.min(options.batchSize, options.claimLimit ?? options.batchSize);
    this.failures = new ClaimFailures(options.name, options.pollIntervalMs, logger, options.recovery);
    if (work.reclaim && options.reclaimIntervalMs) {
      const timerName = options.reclaimTimerName ?? `queuebox:${options.name.replace(/\s+/g, '-')}:reclaim`;
      this.reclaimTimer = new ReclaimTimer(timerName, options.reclaimIntervalMs, () => work.reclaim?.() ?? Promise.resolve(), scheduler);
    }
  }

  /** True once shutdown stopped waiting: late work must leave its rows alone. */
  get abandoned(): boolean {
    return this.abandonedWork;
  }

  get running(): boolean {
    return this.state === 'running';
  }

  /** `stop()` was called (stopping or stopped): work in flight should end without taking on more (an outbox head's followers). */
  get stopped(): boolean {
    return this.state === 'stopping' || this.state === 'stopped';
  }

  get status(): WorkerLoopStatus {
    return {
      name: this.options.name,
      running: this.running,
      lastCycleAt: this.lastCycle,
      inFlight: this.slots.size,
      waitingForDatabase: this.failures.failing,
      claimingSince: this.claimingSince,
    };
  }

  /** Claims held: running, waiting for a slot, or having their outcome written. */
  get inFlightCount(): number {
    return this.slots.size;
  }

  start(): void {
    if (this.state !== 'idle') return;
    this.state = 'running';
    this.reclaimTimer?.start();
    this.loop = this.run();
  }

  /** Claims at once instead of at the end of the current sleep (new work arrived). */
  wake(): void {
    this.waker.wake();
  }

  /** Runs the reclaim step now, then claims at once: another replica ended leases (a dead instance's) that the next reclaim would only find at its interval. */
  async reclaimNow(): Promise<void> {
    await this.work.reclaim?.();
    this.wakeIfRunning();
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

  /** Claims one batch and works through all of it. Returns how many rows it claimed. */
  async runOnce(): Promise<number> {
    return (await this.runBatch()).length;
  }

  /** Claims one batch and works through all of it. Returns the claims, so a caller can look up their outcome. */
  async runBatch(): Promise<C[]> {
    const claims = await this.work.claim(this.perClaim);
    this.lastCycle = new Date();
    await Promise.all(claims.map((claim) => this.hold(claim, claims).done));
    return claims;
  }

  private async run(): Promise<void> {
    while (this.state === 'running') {
      const capacity = this.slots.capacity(this.batched?.stuckSlots() ?? 0);
      if (capacity === 0) {
        await this.pauseForStuckWork();
        continue;
      }
      if (this.pausedByStuckWork) this.logger.log(messages.claimingResumed(this.options.name));
      this.pausedByStuckWork = false;
      if (this.slots.counted > refillPoint(capacity)) {
        // Busy is alive: a full loop waits for its work, not on the database.
        this.lastCycle = new Date();
        this.sleepingFull = true;
        await this.waker.sleep(Number.POSITIVE_INFINITY); // finishing work wakes us
        this.sleepingFull = false;
        // Work that settles in this turn of the event loop makes the next claim bigger.
        await new Promise((resolve) => setImmediate(resolve));
        continue;
      }
      const limit = Math.min(capacity - this.slots.counted, this.perClaim);
      const claims = await this.claim(limit);
      if (claims === undefined) continue;
      for (const claim of claims) this.hold(claim, claims);
      if (claims.length < limit) await this.waker.sleep(this.options.pollIntervalMs);
    }
  }

  /** One claim statement; `undefined` when it failed (after the wait for the database). */
  private async claim(limit: number): Promise<C[] | undefined> {
    this.claimingSince = new Date();
    let claims: C[];
    try {
      claims = await this.work.claim(limit);
    } catch (error) {
      this.claimingSince = undefined;
      await this.waker.sleep(this.failures.failed(error, () => this.waker.wake()));
      return undefined;
    }
    this.claimingSince = undefined;
    this.lastCycle = new Date();
    this.failures.succeeded();
    return claims;
  }

  /** Every slot is kept by hung work: what waits for one goes back, for other replicas to take. */
  private async pauseForStuckWork(): Promise<void> {
    this.lastCycle = new Date();
    await this.releaseWaiting();
    const handedBack = (await this.batched?.releaseUnstarted()) ?? [];
    await Promise.all(handedBack.map((claim) => this.slots.get(claim.id)?.done));
    if (!this.pausedByStuckWork) this.logger.warn(messages.claimingPausedStuck(this.options.name));
    this.pausedByStuckWork = true;
    await this.waker.sleep(this.options.pollIntervalMs); // a freed slot wakes us sooner
  }

  /** Takes a claim in: renewed from now on, started as soon as a slot is free. */
  private hold(claim: C, batch: readonly C[]): HeldClaim<C> {
    return this.slots.hold(claim, this.work.keep(claim, batch), this.work.keyOf(claim) !== null);
  }

  /** Runs one claim's step in its slot, then has its outcome recorded outside the slot. */
  private async runStep(held: HeldClaim<C>): Promise<void> {
    let outcome: StepOutcome<C> | undefined;
    try {
      outcome = await this.work.step(held.claim, held.keeper, held);
    } catch (error) {
      this.logger.error(messages.workFailed(this.options.name, held.claim.id, describeError(error)));
    }
    held.release();
    const finished = outcome !== undefined && !this.abandonedWork && (await this.recorder.record(held.claim, outcome)) === 'finished';
    this.slots.letGo(held);
    // Finishing a keyed row frees its key; a row that went back to pending can be claimed again.
    if (this.sleepingFull || held.keyed || !finished) this.wakeIfRunning();
  }

  private async drain(): Promise<void> {
    this.state = 'stopping';
    this.failures.stop();
    this.reclaimTimer?.stop();
    this.waker.wake();
    await this.loop;
    await this.releaseWaiting();
    const started = this.slots.all();
    if (started.length > 0) {
      this.logger.log(messages.shutdownWaiting(this.options.name, started.length, this.options.shutdownTimeoutMs));
      const finished = await settledWithin(
        started.map((held) => held.done),
        this.options.shutdownTimeoutMs,
      );
      if (!finished) {
        this.abandonedWork = true;
        this.logger.warn(messages.shutdownAbandoned(this.options.name, this.slots.size));
        const reason = new QueueBoxStateError(messages.notRunning(this.options.name));
        for (const held of this.slots.all()) held.keeper.abort(reason);
      }
    }
    this.state = 'stopped';
    this.logger.log(messages.shutdownDone(this.options.name));
  }

  /** Claims that never started go back to `pending` at once instead of waiting for their lease (shutdown, or every slot stuck). */
  private async releaseWaiting(): Promise<void> {
    await Promise.all(
      this.slots.takeWaiting().map(async (held) => {
        await held.keeper.stop();
        await this.recorder.record(held.claim, { kind: 'released' });
        this.work.released?.(held.claim);
        this.slots.letGo(held);
      }),
    );
  }

  private wakeIfRunning(): void {
    if (this.state === 'running') this.waker.wake();
  }
}

/** Claim again once half of `batchSize` is used (at once when the batch is one row). */
function refillPoint(batchSize: number): number {
  return batchSize - Math.max(1, Math.floor(batchSize / 2));
}
