import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { logContext } from '../common/log-context';
import { QUEUEBOX_DIALECT } from '../common/queuebox.constants';
import type { Dialect } from '../dialects/dialect';
import { QueueBoxValidationError } from '../errors/queuebox.errors';
import { QueueBoxEvents } from '../events/queuebox.events';
import { inboxOutcomeRecorder } from '../inbox-runtime/inbox.outcomes';
import { LeaseService } from '../lease/lease.service';
import { isIntegerWithin, isSourceName } from '../options/options.checks';
import { PULL_CLAIM_ARGUMENTS } from '../options/options.table';
import { messages } from '../texts/queuebox.messages';
import type { InboxClaim } from '../types/claims';
import { ClaimPauses } from '../workers/claim-pauses';
import type { OutcomeRecorder } from '../workers/outcome-recorder';

const SOURCE_RULE = 'must be a source name: 1 to 128 letters, digits, ".", "_" or "-", starting with a letter or digit';

/**
 * Pull claims: the `@PullHandler` workers' and your own pull client's. A claim takes, in one
 * statement, rows whose lease expired (a crashed client's) and available pending rows, at most one
 * row of an aggregate in flight, serialized per source. Finish a claim through `LeaseService`
 * (`complete(claim, manager)` in your transaction, `retry`, `deadLetter`; `keep(claim)` renews it
 * while you work).
 *
 * @example
 * const claim = await pullClient.claim('payments', { leaseMs: 30_000, maxAttempts: 10 });
 * if (claim) await dataSource.transaction(async (manager) => {
 *   await applyPayment(manager, claim.message.payload);
 *   if (!(await lease.complete(claim, manager))) throw new Error('claim lost: roll back');
 * });
 */
@Injectable()
export class PullClient {
  private readonly logger: Logger;
  /** Writes the dead letter of a claim beyond `maxAttempts`, as every worker's dead letters are written. */
  private readonly recorder: OutcomeRecorder<InboxClaim>;

  constructor(
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Dialect,
    lease: LeaseService,
    events: QueueBoxEvents,
    @Optional() private readonly pauses?: ClaimPauses,
  ) {
    this.logger = new Logger(logContext('QueueBox:PullClient', events.queuebox));
    this.recorder = inboxOutcomeRecorder(lease, events, this.logger);
  }

  /**
   * Claims the next message of `source`, or returns `null` when there is none. With
   * `maxAttempts`, a message claimed for an attempt beyond it (every earlier claim expired: your
   * client crashed or hung on it) is dead-lettered instead of returned, and the next one is
   * claimed; without it such a message is returned however often its claims expired.
   */
  async claim(source: string, options: { leaseMs: number; maxAttempts?: number }): Promise<InboxClaim | null> {
    checkPullClaim('PullClient.claim', { source, limit: 1, ...options });
    for (;;) {
      const [claimed] = await this.claimRows({ source, limit: 1, leaseMs: options.leaseMs });
      if (!claimed) return null;
      const [claim] = await this.liveClaims([claimed], options.maxAttempts);
      // A claim that used up its attempts is dead now: look for the next message.
      if (claim) return claim;
    }
  }

  /** A claim of up to `limit` rows of `source` (what `claim` does for one). */
  async claimBatch(p: { source: string; limit: number; leaseMs: number; maxAttempts?: number }): Promise<InboxClaim[]> {
    checkPullClaim('PullClient.claimBatch', p);
    return this.liveClaims(await this.claimRows(p), p.maxAttempts);
  }

  private async claimRows(p: { source: string; limit: number; leaseMs: number }): Promise<InboxClaim[]> {
    // Issue 40: a paused source is not claimed (its expired claims included: they wait for the resume).
    if (this.pauses) {
      const paused = this.pauses.namesNow('inbox', this.pauses.defaultMaxAgeMs) ?? (await this.pauses.names('inbox'));
      if (paused.length > 0 && paused.includes(p.source)) return [];
    }
    const rows = await this.dialect.inboxPullClaimBatch(p);
    return rows.map((row) => ({ component: 'pull', table: 'inbox', leaseMs: p.leaseMs, ...row }));
  }

  /**
   * The pull claim statement takes expired rows directly, so pull has no reclaim step to end a
   * message that kills its worker every time (I8): a claim beyond `maxAttempts` is that step. It
   * is dead-lettered, fenced by its own fresh token, before any handler sees it.
   */
  private async liveClaims(claims: InboxClaim[], maxAttempts: number | undefined): Promise<InboxClaim[]> {
    if (maxAttempts === undefined || claims.every((claim) => claim.attempt <= maxAttempts)) return claims;
    const spent = claims.filter((claim) => claim.attempt > maxAttempts);
    const reason = (claim: InboxClaim) => messages.pullAttemptsExpired(claim.attempt - 1, maxAttempts);
    await Promise.all(spent.map((claim) => this.recorder.record(claim, { kind: 'expired', reason: reason(claim) })));
    return claims.filter((claim) => claim.attempt <= maxAttempts);
  }
}

/**
 * Refuses arguments that would make a claim wrong rather than fail: a lease of zero or less is
 * already expired when it is granted (another claim takes the row at once: handled twice).
 */
function checkPullClaim(where: string, p: { source: unknown; limit: unknown; leaseMs: unknown; maxAttempts?: unknown }): void {
  if (typeof p !== 'object' || p === null)
    throw new QueueBoxValidationError('options', messages.leaseArgumentInvalid(where, 'options', 'must be an object', p));
  if (!isSourceName(p.source))
    throw new QueueBoxValidationError('source', messages.leaseArgumentInvalid(where, 'source', SOURCE_RULE, p.source));
  for (const [field, { integer }] of Object.entries(PULL_CLAIM_ARGUMENTS)) {
    const value = p[field as keyof typeof PULL_CLAIM_ARGUMENTS];
    if (value === undefined && field === 'maxAttempts') continue;
    if (!isIntegerWithin(value, integer)) {
      const rule = `must be an integer from ${integer.min} to ${integer.max}`;
      throw new QueueBoxValidationError(field, messages.leaseArgumentInvalid(where, field, rule, value));
    }
  }
}
