import type { Dialect } from '../dialects/dialect';
import type { ReclaimResult } from '../dialects/dialect-rows';
import type { QueueBoxEvents } from '../events/queuebox.events';
import type { OutboxClaim } from '../types/claims';

/**
 * The outbox poller's claims: up to `limit` available rows, at most one per key and none of a key
 * with a row in flight or an earlier row unfinished, each with a lease by the database clock; and
 * the reclaim step of expired leases.
 */
export class OutboxClaims {
  constructor(
    private readonly dialect: Dialect,
    private readonly events: QueueBoxEvents,
  ) {}

  /** The dialect decodes each row into the claim itself (no copy per claim). */
  claim(p: { limit: number; leaseMs: number; paused?: readonly string[] }): Promise<OutboxClaim[]> {
    return this.dialect.outboxClaimBatch(p);
  }

  /**
   * The reclaim step: returns rows whose lease expired to `pending`, or to `dead` when they used
   * up `maxAttempts` (a message that crashes its worker every time cannot loop forever); with
   * `attemptHistory`, each expired attempt is recorded in the row's history by the same statement.
   */
  async reclaim(p: { maxAttempts: number; attemptHistory?: number }): Promise<ReclaimResult> {
    const result = await this.dialect.outboxReclaim(p);
    for (const counts of result.byName) this.events.emit('queuebox:reclaimed', { component: 'outbox', ...counts });
    return result;
  }
}
