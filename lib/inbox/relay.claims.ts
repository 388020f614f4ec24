import type { Logger } from '@nestjs/common';
import { describeError } from '../common/errors';
import type { Dialect } from '../dialects/dialect';
import type { ReclaimResult } from '../dialects/dialect-rows';
import type { QueueBoxEvents } from '../events/queuebox.events';
import type { InboxFollowers } from '../inbox-runtime/inbox.followers';
import { messages } from '../texts/queuebox.messages';
import type { InboxClaim } from '../types/claims';

/** A relay's claim: a claimed head, with the followers read right behind it (forwarded in its transaction). */
export interface RelayClaim extends InboxClaim {
  /** The rows right after the head of its aggregate (see `InboxFollowers.read`), in id order; they ride on its claim. */
  readonly followers: InboxClaim[];
}

/** Claims a relay holds at once: it claims, reads and routes one while the other's transaction writes (see `RelayClaims`). */
const CLAIMS_HELD = 2;

/** One claim's share of a relay budget (`batchSize` in heads, `maxFollowers` in followers), rounded up. */
export function claimShare(budget: number): number {
  return Math.ceil(budget / CLAIMS_HELD);
}

/** How the relay's claims take followers (see `RelayClaims`). */
export interface RelayFollowersOptions {
  reader: InboxFollowers;
  /** `inbox.relay.maxFollowers`: most followers held at once; a claim reads at most half of them. */
  maxFollowers: number;
  logger: Logger;
}

/**
 * The inbox relay's claims: heads of its sources, at most one per (source, aggregate), serialized
 * by the relay's claim lock, each with its followers: so an aggregate advances by more than one row
 * per round trip of its head. And its reclaim step over those sources.
 *
 * One claim reads at most half of `maxFollowers`, and the relay's loop asks for at most half of
 * `batchSize` in heads (`claimShare`, the loop's `claimLimit` in InboxRelay). The heads of one claim tend to finish
 * together (their forwards share a transaction), and the loop claims again once half its heads are
 * finished: so a relay with a backlog holds two claims' rows, and claims, reads and routes the next
 * while the previous one's transaction writes (issue 36, W5 relay with 5,000 followers held:
 * 18,000-21,000 msg/s with one claim's rows at a time, 23,000-25,000 with two).
 */
export class RelayClaims {
  /** Followers read and not yet finished. */
  private followersHeld = 0;

  /** With `followers`, each claim reads its heads' followers within those limits; without, it claims heads alone. */
  constructor(
    private readonly dialect: Dialect,
    private readonly events: QueueBoxEvents,
    private readonly followers?: RelayFollowersOptions,
  ) {}

  async claim(p: { sources: string[]; limit: number; leaseMs: number }): Promise<RelayClaim[]> {
    if (p.sources.length === 0) return [];
    const rows = await this.dialect.inboxRelayClaimBatch(p);
    const heads: RelayClaim[] = rows.map((row) => ({ component: 'relay', table: 'inbox', leaseMs: p.leaseMs, followers: [], ...row }));
    if (!this.followers) return heads;
    const { reader, maxFollowers, logger } = this.followers;
    const room = Math.min(claimShare(maxFollowers), maxFollowers - this.followersHeld);
    if (heads.length === 0 || room < 1) return heads;
    try {
      const read = await reader.read(heads, { room });
      for (const [head, followers] of read) {
        (head as RelayClaim).followers.push(...followers);
        this.followersHeld += followers.length;
      }
    } catch (error) {
      // The heads are claimed: forward them alone rather than leave them to their leases.
      logger.warn(messages.relayFollowersReadFailed(describeError(error)));
    }
    return heads;
  }

  /** The head's forward ended (whatever its outcome): its followers are held no more. */
  finished(claim: RelayClaim): void {
    this.followersHeld -= claim.followers.length;
  }

  /** Returns rows of `sources` whose lease expired to `pending`, or to `dead` after `maxAttempts`. */
  async reclaim(p: { sources: string[]; maxAttempts: number; attemptHistory?: number }): Promise<ReclaimResult> {
    if (p.sources.length === 0) return { pending: 0, dead: 0, byName: [] };
    const result = await this.dialect.inboxReclaim(p);
    for (const counts of result.byName) this.events.emit('queuebox:reclaimed', { component: 'relay', ...counts });
    return result;
  }
}
