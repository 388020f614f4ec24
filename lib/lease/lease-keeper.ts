// Fencing: renews one claim while its work runs and aborts the work when the claim is lost.
// Made by `LeaseService.keep` alone: for every worker's claims, and for custom pull clients.

import { ClaimLostError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';
import type { Claim } from '../types/claims';

/** The renewal of a keeper that has not renewed yet: one promise for all of them. */
const SETTLED: Promise<void> = Promise.resolve();

/** How often a claim is renewed: every third of its lease. */
const renewalIntervalMs = (leaseMs: number) => Math.max(1, Math.floor(leaseMs / 3));

/** @internal What QueueBox's own work registers with `LeaseKeeper.watch`: called once if the claim's work must stop. */
export interface KeeperWatcher {
  keeperAborted(reason: unknown): void;
}

/**
 * Keeps one claim alive while its work runs: renews every third of the lease and aborts
 * `signal` when a renewal changes nothing or fails. Call `stop()` before the finishing write: a
 * renewal racing the completing write would wait for it and then see zero rows, which is not a
 * lost claim.
 */
export class LeaseKeeper {
  /** Made when `signal` is first read: most claims finish without anyone reading it (an AbortSignal is costly to create). */
  private controller?: AbortController;
  private abortReason?: { reason: unknown };
  private abortListeners?: Set<(reason: unknown) => void>;
  /** The work QueueBox itself runs under this claim (a publish), told of an abort without a listener closure. */
  private watcher?: KeeperWatcher;
  /** Its own renewal timer, or none when a `LeaseKeeperGroup` renews it with the claims it was claimed with. */
  private readonly timer?: NodeJS.Timeout;
  private readonly group?: LeaseKeeperGroup;
  private groupSlot = -1;
  private renewal: Promise<void> = SETTLED;
  /** Renewals scheduled and not ended yet. */
  private renewals = 0;
  private stopped = false;
  /**
   * @internal When the statement that last set this claim's lease was sent, on this process's
   * monotonic clock (`performance.now()`): the claim (given by its creator) or the last renewal
   * that kept it. The database set the expiry to its own clock plus the lease *after* that send,
   * so the lease ends no earlier than this plus `claim.leaseMs`, whatever the hosts' clocks say.
   */
  leaseFrom: number;

  /**
   * `renew(claim)` renews the claim once (resolves whether it changed its row); `onLost(claim)` is
   * told when a renewal lost it. With `group`, the group's timer renews it (see `LeaseKeeperGroup`);
   * `leaseFrom` defaults to now.
   */
  constructor(
    private readonly claim: Claim,
    private readonly renew: (claim: Claim) => Promise<boolean>,
    private readonly onLost: (claim: Claim) => void,
    group?: LeaseKeeperGroup,
    leaseFrom?: number,
  ) {
    this.leaseFrom = leaseFrom ?? performance.now();
    if (group) {
      this.group = group;
      this.groupSlot = group.join(this);
      return;
    }
    this.timer = setInterval(() => this.scheduleRenewal(), renewalIntervalMs(claim.leaseMs));
    this.timer.unref();
  }

  /** @internal Queues one renewal after those already queued (the keeper's own timer, or its group's). */
  scheduleRenewal(): void {
    this.renewals++;
    this.renewal = this.renewal.then(() => this.renewOnce());
  }

  /** @internal Whether a renewal is queued or running (then `stop()` has one to wait for). */
  get renewing(): boolean {
    return this.renewals > 0;
  }

  /**
   * @internal Tells `watcher` (once) when the work must stop: the claim was lost or `abort()` was
   * called. Returns false, registering nothing, when that already happened. One watcher at a time;
   * `unwatch()` removes it.
   */
  watch(watcher: KeeperWatcher): boolean {
    if (this.abortReason) return false;
    this.watcher = watcher;
    return true;
  }

  /** @internal */
  unwatch(): void {
    this.watcher = undefined;
  }

  /**
   * @internal A renewal sent at `sentAt` (`performance.now()`) kept the claim: its lease now lasts
   * from then at least (`leaseFrom`). The keeper's own renewals say it; so does a renewal its
   * worker sends itself (the outbox poller's, before a publish the lease is too short for).
   */
  renewedAt(sentAt: number): void {
    this.leaseFrom = Math.max(this.leaseFrom, sentAt);
  }

  /** Aborts when the claim is lost (reason: `ClaimLostError`) or `abort()` is called. */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.abortReason) this.controller.abort(this.abortReason.reason);
    }
    return this.controller.signal;
  }

  /** Whether `signal` aborted (without making the signal). */
  get aborted(): boolean {
    return this.abortReason !== undefined;
  }

  /** True once a renewal showed the claim lost. */
  get lost(): boolean {
    return this.abortReason?.reason instanceof ClaimLostError;
  }

  /**
   * Calls `listener` with the reason when `signal` aborts, at once if it already did, like an
   * 'abort' listener on `signal` but without making the signal. Returns the unsubscribe function.
   */
  onAbort(listener: (reason: unknown) => void): () => void {
    if (this.abortReason) {
      listener(this.abortReason.reason);
      return () => undefined;
    }
    this.abortListeners ??= new Set();
    this.abortListeners.add(listener);
    return () => this.abortListeners?.delete(listener);
  }

  /** Stops renewing and waits for a renewal in flight, so the finishing write runs alone. */
  stop(): Promise<void> {
    this.stopRenewing();
    return this.renewal;
  }

  /** Stops renewing and aborts the work with `reason` (used on shutdown). */
  abort(reason: unknown): void {
    this.stopRenewing();
    if (this.abortReason) return;
    this.abortReason = { reason };
    this.controller?.abort(reason);
    const watcher = this.watcher;
    this.watcher = undefined;
    watcher?.keeperAborted(reason);
    const listeners = this.abortListeners;
    this.abortListeners = undefined;
    for (const listener of listeners ?? []) listener(reason);
  }

  private stopRenewing(): void {
    if (this.stopped) return;
    this.stopped = true;
    if (this.group) this.group.leave(this.groupSlot);
    else clearInterval(this.timer);
  }

  private async renewOnce(): Promise<void> {
    try {
      await this.renewUnlessStopped();
    } finally {
      this.renewals--;
    }
  }

  private async renewUnlessStopped(): Promise<void> {
    if (this.stopped) return;
    let renewed: boolean;
    let timer: NodeJS.Timeout | undefined;
    const sentAt = performance.now();
    try {
      // A renewal starts at most a third of the lease after the last one landed: one without an
      // answer two thirds of the lease later cannot have kept the lease (a dead connection, a
      // silent partition). It counts as failed, so the work is aborted and `stop()` does not wait
      // for an answer that may never come.
      const unanswered = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), Math.max(1, Math.floor((this.claim.leaseMs * 2) / 3)));
        timer.unref();
      });
      renewed = await Promise.race([this.renew(this.claim), unanswered]);
    } catch {
      renewed = false;
    } finally {
      clearTimeout(timer);
    }
    if (renewed) this.renewedAt(sentAt);
    if (!renewed && !this.stopped) {
      this.onLost(this.claim);
      this.abort(new ClaimLostError(messages.claimLost(this.claim.component, this.claim.id)));
    }
  }
}

/**
 * One renewal timer for the claims of one claim statement (an outbox poller's batch): they were
 * claimed at the same moment with the same lease, so they are due for renewal together. Each
 * keeper of the group renews its own claim (a fenced statement of its own, exactly as alone), on
 * the group's timer instead of a timer per claim. The timer stops when the last keeper stops, and
 * a stopped keeper's place is emptied, so a claim that finished is not held by the group.
 */
export class LeaseKeeperGroup {
  private members: (LeaseKeeper | undefined)[] = [];
  private live = 0;
  private timer?: NodeJS.Timeout;

  constructor(private readonly leaseMs: number) {}

  /** @internal Adds a keeper; returns its place, for `leave`. */
  join(keeper: LeaseKeeper): number {
    if (!this.timer) {
      this.timer = setInterval(() => this.renewAll(), renewalIntervalMs(this.leaseMs));
      this.timer.unref();
    }
    this.live++;
    return this.members.push(keeper) - 1;
  }

  /** @internal A keeper stopped: it is renewed no more. */
  leave(slot: number): void {
    if (this.members[slot] === undefined) return;
    this.members[slot] = undefined;
    if (--this.live > 0) return;
    clearInterval(this.timer);
    this.timer = undefined;
    this.members = [];
  }

  private renewAll(): void {
    for (const keeper of this.members) keeper?.scheduleRenewal();
  }
}
