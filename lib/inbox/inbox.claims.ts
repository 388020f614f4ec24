import type { Dialect } from '../dialects/dialect';
import type { ReclaimResult } from '../dialects/dialect-rows';
import type { QueueBoxEvents } from '../events/queuebox.events';
import type { InboxClaim } from '../types/claims';

/**
 * The inbox relay's claims: up to `limit` rows of `sources`, at most one per (source, aggregate),
 * serialized by the relay's claim lock; and its reclaim step over those sources.
 */
export class RelayClaims {
  constructor(
    private readonly dialect: Dialect,
    private readonly events: QueueBoxEvents,
  ) {}

  async claim(p: { sources: string[]; limit: number; leaseMs: number }): Promise<InboxClaim[]> {
    if (p.sources.length === 0) return [];
    const rows = await this.dialect.inboxRelayClaimBatch(p);
    return rows.map((row) => ({ component: 'inbox', table: 'inbox', leaseMs: p.leaseMs, ...row }));
  }

  /** Returns rows of `sources` whose lease expired to `pending`, or to `dead` after `maxAttempts`. */
  async reclaim(p: { sources: string[]; maxAttempts: number }): Promise<ReclaimResult> {
    if (p.sources.length === 0) return { pending: 0, dead: 0, byName: [] };
    const result = await this.dialect.inboxReclaim(p);
    for (const counts of result.byName) this.events.emit('queuebox:reclaimed', { component: 'inbox', ...counts });
    return result;
  }
}
