// Fencing: renews one claim while its work runs and aborts the work when the claim is lost.
// Made for ClaimLoop's claims (LeaseService.keep / keepOn, or the outbox poller's own renewal) and
// returned to custom pull clients by the public `LeaseService.keep`.

import { ClaimLostError } from '../errors/queuebox.errors';
import { messages } from '../queuebox.messages';
import type { Claim } from '../types/claims';

/** The renewal of a keeper that has not renewed yet: one promise for all of them. */
const SETTLED: Promise<void> = Promise.resolve();

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
  private readonly timer: NodeJS.Timeout;
  private renewal: Promise<void> = SETTLED;
  private stopped = false;

  constructor(
    private readonly claim: Claim,
    private readonly renew: () => Promise<boolean>,
    private readonly onLost: (claim: Claim) => void,
  ) {
    this.timer = setInterval(
      () => {
        this.renewal = this.renewal.then(() => this.renewOnce());
      },
      Math.max(1, Math.floor(claim.leaseMs / 3)),
    );
    this.timer.unref();
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
    this.stopped = true;
    clearInterval(this.timer);
    return this.renewal;
  }

  /** Stops renewing and aborts the work with `reason` (used on shutdown). */
  abort(reason: unknown): void {
    this.stopped = true;
    clearInterval(this.timer);
    if (this.abortReason) return;
    this.abortReason = { reason };
    this.controller?.abort(reason);
    const listeners = this.abortListeners;
    this.abortListeners = undefined;
    for (const listener of listeners ?? []) listener(reason);
  }

  private async renewOnce(): Promise<void> {
    if (this.stopped) return;
    let renewed: boolean;
    let timer: NodeJS.Timeout | undefined;
    try {
      // A renewal starts at most a third of the lease after the last one landed: one without an
      // answer two thirds of the lease later cannot have kept the lease (a dead connection, a
      // silent partition). It counts as failed, so the work is aborted and `stop()` does not wait
      // for an answer that may never come.
      const unanswered = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), Math.max(1, Math.floor((this.claim.leaseMs * 2) / 3)));
        timer.unref();
      });
      renewed = await Promise.race([this.renew(), unanswered]);
    } catch {
      renewed = false;
    } finally {
      clearTimeout(timer);
    }
    if (!renewed && !this.stopped) {
      this.onLost(this.claim);
      this.abort(new ClaimLostError(messages.claimLost(this.claim.component, this.claim.id)));
    }
  }
}
