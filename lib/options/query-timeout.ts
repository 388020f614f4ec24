import type { ResolvedQueueBoxOptions } from './options.resolved';

/**
 * No bound below this: on a busy database a claim or a completion can take a second, and a
 * statement cut off too early costs an attempt (its rows wait for their lease to expire).
 */
const MIN_QUERY_TIMEOUT_MS = 2000;

/**
 * The bound on each of QueueBox's own statements: a third of the shortest lease it is configured
 * with (outbox and relay `claimTimeoutMs`, `pull.defaultLeaseMs`), at least 2 s. A third is the
 * renewal interval: a statement that waits longer than that cannot keep a lease alive anyway, and
 * after a silent network partition (sockets open, nothing answered) the workers give up on the
 * dead connection and reconnect instead of waiting forever, and `app.close()` ends. Defaults:
 * leases 300 s, 300 s and 30 s give 10 s.
 */
export function queryTimeoutFor(options: ResolvedQueueBoxOptions): number {
  const shortestLease = Math.min(options.outbox.leaseMs, options.inbox.relay.leaseMs, options.pull.leaseMs);
  return Math.max(MIN_QUERY_TIMEOUT_MS, Math.floor(shortestLease / 3));
}
