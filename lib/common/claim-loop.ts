import type { Logger } from '@nestjs/common';
import type { SchedulerRegistry } from '@nestjs/schedule';
import { QueueBoxStateError } from '../errors/queuebox.errors';
import type { LeaseService } from '../lease/lease.service';
import type { Claim } from '../lease/lease.types';
import type { LeaseKeeper } from '../lease/lease-keeper';
import { messages } from '../queuebox.messages';
import { describeError } from './errors';
import { settledWithin, Waker } from './wait';

const MAX_CLAIM_RETRY_MS = 30_000;

export interface ClaimLoopOptions {
  /** Names the worker in logs and timers ("outbox poller", "inbox relay", ...). */
  name: string;
  concurrency: number;
  batchSize: number;
  pollIntervalMs: number;
  shutdownTimeoutMs: number;
  /** The reclaim step runs at start and then at this interval; omit when claims take expired rows themselves. */
  reclaimIntervalMs?: number;
  /** Name of the reclaim interval in the app's `SchedulerRegistry` (when `@nestjs/schedule` is set up). */
  reclaimTimerName?: string;
}

export interface ClaimLoopWork<C extends Claim> {
  claim(limit: number): Promise<C[]>;
  /** Handles one claim. The keeper renews it; after `keeper.stop()`, check `loop.abandoned` before writing. */
  process(claim: C, keeper: LeaseKeeper): Promise<void>;
  reclaim?(): Promise<void>;
  /** Starts renewing a claim; default `lease.keep(claim)`. */
  keep?(claim: C): LeaseKeeper;
}

/**
 * The claim-and-dispatch loop every QueueBox worker shares: claims as many rows as it has free
 * slots, runs each with a renewing lease, claims again at once while a backlog lasts and sleeps
 * `pollIntervalMs` when there is none. `stop()` stops claiming and waits up to
 * `shutdownTimeoutMs` for work in flight; what is still running then is abandoned (its signal is
 * aborted and its row stays `processing` until the lease expires).
 */
export class ClaimLoop<C extends Claim> {
  private readonly inFlight = new Map<string, { keeper: LeaseKeeper; done: Promise<void> }>();
  private readonly waker = new Waker();
  private state: 'idle' | 'running' | 'stopping' | 'stopped' = 'idle';
  private loop?: Promise<void>;
  private reclaimTimer?: NodeJS.Timeout;
  private readonly timerName: string;
  private abandonedWork = false;

  constructor(
    private readonly options: ClaimLoopOptions,
    private readonly work: ClaimLoopWork<C>,
    private readonly lease: LeaseService,
    private readonly logger: Logger,
    private readonly scheduler?: SchedulerRegistry,
  ) {
    this.timerName = options.reclaimTimerName ?? `queuebox:${options.name.replace(/\s+/g, '-')}:reclaim`;
  }

  /** True once shutdown stopped waiting: late work must leave its rows alone. */
  get abandoned(): boolean {
    return this.abandonedWork;
  }

  get running(): boolean {
    return this.state === 'running';
  }

  get inFlightCount(): number {
    return this.inFlight.size;
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
    if (this.reclaimTimer) {
      clearInterval(this.reclaimTimer);
      if (this.scheduler?.doesExist('interval', this.timerName)) this.scheduler.deleteInterval(this.timerName);
    }
    this.waker.wake();
    await this.loop;
    if (this.inFlight.size > 0) {
      this.logger.log(messages.shutdownWaiting(this.options.name, this.inFlight.size, this.options.shutdownTimeoutMs));
      const finished = await settledWithin(
        [...this.inFlight.values()].map((work) => work.done),
        this.options.shutdownTimeoutMs,
      );
      if (!finished) {
        this.abandonedWork = true;
        this.logger.warn(messages.shutdownAbandoned(this.options.name, this.inFlight.size));
        const reason = new QueueBoxStateError(messages.notRunning(this.options.name));
        for (const work of this.inFlight.values()) work.keeper.abort(reason);
      }
    }
    this.state = 'stopped';
    this.logger.log(messages.shutdownDone(this.options.name));
  }

  /** Claims one batch and waits for all of it. Returns how many rows it claimed. */
  async runOnce(): Promise<number> {
    const claims = await this.work.claim(this.options.batchSize);
    await Promise.all(claims.map((claim) => this.dispatch(claim)));
    return claims.length;
  }

  private async run(): Promise<void> {
    let failures = 0;
    while (this.state === 'running') {
      const free = this.options.concurrency - this.inFlight.size;
      if (free <= 0) {
        await this.waker.sleep(Number.POSITIVE_INFINITY); // a finishing claim wakes us
        continue;
      }
      const limit = Math.min(this.options.batchSize, free);
      let claims: C[];
      try {
        claims = await this.work.claim(limit);
        failures = 0;
      } catch (error) {
        failures++;
        const retryMs = Math.min(MAX_CLAIM_RETRY_MS, this.options.pollIntervalMs * 2 ** Math.min(failures, 10));
        this.logger.error(messages.claimFailed(this.options.name, describeError(error), retryMs));
        await this.waker.sleep(retryMs);
        continue;
      }
      // Rows claimed while stopping are worked on too: shutdown waits for them like any other.
      for (const claim of claims) void this.dispatch(claim);
      if (claims.length < limit) await this.waker.sleep(this.options.pollIntervalMs);
    }
  }

  private dispatch(claim: C): Promise<void> {
    const keeper = this.work.keep ? this.work.keep(claim) : this.lease.keep(claim);
    const done = this.work
      .process(claim, keeper)
      .catch((error) => this.logger.error(messages.workFailed(this.options.name, claim.id, describeError(error))))
      .finally(() => {
        this.inFlight.delete(claim.id);
        if (this.state === 'running') this.waker.wake();
      });
    this.inFlight.set(claim.id, { keeper, done });
    return done;
  }
}
