import type { Logger } from '@nestjs/common';
import { describeError } from '../common/errors';
import type { Dialect } from '../dialects/dialect';
import type { ResolvedOutboxOptions } from '../options/options.resolved';
import { messages } from '../texts/queuebox.messages';
import type { OutboxClaim } from '../types/claims';

/**
 * `outbox.rateLimits` (issue 41): before a claimed batch is published, each rate-limited
 * destination's claims take tokens from its bucket, one statement per destination, by the database
 * clock, so every replica draws on the same bucket. The oldest claims get the tokens; each of the
 * others is put off (back to `pending`, its attempt not counted) until the bucket should have a
 * token for it. A put-off row is still the unfinished head of its key, so no later row of the key
 * can be claimed before it: the key keeps its order while the destination waits.
 */
export class OutboxRateLimits {
  constructor(
    private readonly dialect: Dialect,
    private readonly limits: ResolvedOutboxOptions['rateLimits'],
    private readonly logger: Logger,
  ) {}

  get enabled(): boolean {
    return Object.keys(this.limits).length > 0;
  }

  /** Whether `destination` has a rate limit (its messages take tokens). */
  limited(destination: string): boolean {
    return Object.hasOwn(this.limits, destination);
  }

  /**
   * Takes the tokens `claims` need; returns how long each claim without one is put off (ms), or
   * undefined when none of them goes to a rate-limited destination. A take that fails (the
   * database, or migration 008 missing) puts the destination's claims off as if the bucket were
   * empty: over the limit is never the fallback.
   */
  async admit(claims: readonly OutboxClaim[]): Promise<Map<OutboxClaim, number> | undefined> {
    let byDestination: Map<string, OutboxClaim[]> | undefined;
    for (const claim of claims) {
      const { destination } = claim.message;
      if (!this.limited(destination)) continue;
      byDestination ??= new Map();
      const group = byDestination.get(destination);
      if (group) group.push(claim);
      else byDestination.set(destination, [claim]);
    }
    if (!byDestination) return undefined;
    const deferred = new Map<OutboxClaim, number>();
    await Promise.all(
      [...byDestination].map(async ([destination, group]) => {
        const limit = this.limits[destination];
        group.sort((a, b) => (BigInt(a.message.id) < BigInt(b.message.id) ? -1 : 1));
        let granted = 0;
        let tokens = 0;
        try {
          ({ granted, tokens } = await this.dialect.rateLimitTake({ destination, ...limit, count: group.length }));
        } catch (error) {
          this.logger.warn(messages.rateLimitTakeFailed(destination, describeError(error)));
        }
        // The i-th claim without a token needs (i + 1 - tokens) more; the bucket refills at perSecond.
        for (let i = granted; i < group.length; i++) {
          const missing = i - granted + 1 - Math.max(0, tokens);
          deferred.set(group[i], Math.max(1, Math.ceil((missing / limit.perSecond) * 1000)));
        }
      }),
    );
    return deferred;
  }
}
