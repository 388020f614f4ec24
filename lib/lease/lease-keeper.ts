import { ClaimLostError } from '../errors/queuebox.errors';
import { messages } from '../queuebox.messages';
import type { Claim } from './lease.types';

/**
 * Keeps one claim alive while its work runs: renews every third of the lease and aborts
 * `signal` when a renewal changes nothing or fails. Call `stop()` before the finishing write: a
 * renewal racing the completing write would wait for it and then see zero rows, which is not a
 * lost claim.
 */
export class LeaseKeeper {
  private readonly controller = new AbortController();
  private readonly timer: NodeJS.Timeout;
  private renewal: Promise<void> = Promise.resolve();
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
    return this.controller.signal;
  }

  /** True once a renewal showed the claim lost. */
  get lost(): boolean {
    return this.controller.signal.reason instanceof ClaimLostError;
  }

  /** Stops renewing and waits for a renewal in flight, so the finishing write runs alone. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.renewal;
  }

  /** Stops renewing and aborts the work with `reason` (used on shutdown). */
  abort(reason: unknown): void {
    this.stopped = true;
    clearInterval(this.timer);
    if (!this.controller.signal.aborted) this.controller.abort(reason);
  }

  private async renewOnce(): Promise<void> {
    if (this.stopped) return;
    let renewed: boolean;
    try {
      renewed = await this.renew();
    } catch {
      renewed = false;
    }
    if (!renewed && !this.stopped) {
      this.onLost(this.claim);
      this.abort(new ClaimLostError(messages.claimLost(this.claim.component, this.claim.id)));
    }
  }
}
