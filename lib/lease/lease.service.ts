import { Inject, Injectable } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import { describeError } from '../common/errors';
import type { Dialect, InboxClaimedRow, LeaseTable } from '../dialects/dialect';
import type { ReclaimResult } from '../dialects/dialect-rows';
import { QueueBoxEvents } from '../events/queuebox.events';
import { MESSAGE_ID_HEADER, QUEUEBOX_DIALECT } from '../queuebox.constants';
import type { Claim, InboxClaim, OutboxClaim } from './lease.types';
import { LeaseKeeper } from './lease-keeper';

/**
 * The one place that claims, renews, completes, retries, dead-letters and reclaims rows.
 *
 * Every finishing write is fenced (row id, state `processing`, the claim's token, a lease later
 * than the database clock) and returns whether it changed exactly one row. `false` means the claim
 * is lost: stop working on the row and change nothing more; never retry with another token. The
 * first loss of each claim is counted in `queuebox_claims_lost_total{component}`.
 *
 * @example
 * const [claim] = await lease.claimOutboxBatch({ limit: 1, leaseMs: 30_000 });
 * if (claim && !(await lease.complete(claim))) console.warn('someone else owns it now');
 */
@Injectable()
export class LeaseService {
  private readonly lostClaims = new WeakSet<Claim>();

  constructor(
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Dialect,
    private readonly events: QueueBoxEvents,
  ) {}

  /** Claims up to `limit` outbox rows, at most one per key, each with a lease of `leaseMs` by the database clock. */
  async claimOutboxBatch(p: { limit: number; leaseMs: number }): Promise<OutboxClaim[]> {
    const rows = await this.dialect.outboxClaimBatch(p);
    return rows.map((row) => ({
      component: 'outbox',
      id: row.id,
      token: row.token,
      leaseMs: p.leaseMs,
      leaseExpiresAt: row.leaseExpiresAt,
      attempt: row.attempts,
      message: {
        id: row.id,
        messageId: row.messageId,
        destination: row.destination,
        key: row.key,
        payload: row.payload,
        headers: { ...row.headers, [MESSAGE_ID_HEADER]: row.messageId },
        attempt: row.attempts,
        createdAt: row.createdAt,
      },
    }));
  }

  /**
   * Claims the next message of `source` for a custom pull client, or returns `null` when there is
   * none. Takes a pending row or one whose lease expired, at most one per aggregate in flight.
   * Finish it with `complete(claim, manager)` in your transaction (or `retry` / `deadLetter`);
   * keep it alive with `renew(claim)` (or `keep(claim)`) while you work.
   *
   * @example
   * const claim = await lease.claim('payments', { leaseMs: 30_000 });
   * if (claim) await dataSource.transaction(async (manager) => {
   *   await applyPayment(manager, claim.message.payload);
   *   if (!(await lease.complete(claim, manager))) throw new Error('claim lost: roll back');
   * });
   */
  async claim(source: string, options: { leaseMs: number }): Promise<InboxClaim | null> {
    const [claim] = await this.claimPullBatch({ source, limit: 1, leaseMs: options.leaseMs });
    return claim ?? null;
  }

  /** A pull claim of up to `limit` rows of `source` (what `claim` does for one). */
  async claimPullBatch(p: { source: string; limit: number; leaseMs: number }): Promise<InboxClaim[]> {
    return this.toInboxClaims('pull', await this.dialect.inboxPullClaimBatch(p), p.leaseMs);
  }

  /** The inbox relay's claim: up to `limit` rows of `sources`, at most one per (source, aggregate). */
  async claimRelayBatch(p: { sources: string[]; limit: number; leaseMs: number }): Promise<InboxClaim[]> {
    if (p.sources.length === 0) return [];
    return this.toInboxClaims('inbox', await this.dialect.inboxRelayClaimBatch(p), p.leaseMs);
  }

  /** Extends the lease by `claim.leaseMs` from the database's current time (on `manager`'s connection when given). */
  async renew(claim: Claim, manager?: EntityManager): Promise<boolean> {
    const expires = await this.dialect.leaseRenew({ ...this.fence(claim), leaseMs: claim.leaseMs, manager });
    if (expires) claim.leaseExpiresAt = expires;
    return this.fenced(claim, expires !== null);
  }

  /** Marks the row `sent` (outbox) or `processed` (inbox); inside `manager`'s transaction when given. */
  async complete(claim: Claim, manager?: EntityManager): Promise<boolean> {
    return this.fenced(claim, await this.dialect.leaseComplete({ ...this.fence(claim), manager }));
  }

  /**
   * Completes many claims (all of one table) with one fenced statement. Returns the claims that
   * changed a row; every other one is lost (and counted).
   */
  async completeBatch(claims: readonly Claim[]): Promise<Set<Claim>> {
    if (claims.length === 0) return new Set();
    const done = await this.dialect.leaseCompleteBatch({
      table: this.fence(claims[0]).table,
      claims: claims.map((c) => ({ id: c.id, token: c.token })),
    });
    const completed = new Set<Claim>();
    for (const claim of claims) if (this.fenced(claim, done.has(claim.id))) completed.add(claim);
    return completed;
  }

  /** Gives back a claim whose work never started (on shutdown): `pending` again, its attempt not counted. */
  async release(claim: Claim): Promise<boolean> {
    return this.fenced(claim, await this.dialect.leaseRelease(this.fence(claim)));
  }

  /** Returns the row to `pending`, to be claimed again after `delayMs` (default 0), recording `error`. */
  async retry(claim: Claim, options: { delayMs?: number; error?: unknown } = {}): Promise<boolean> {
    const error = options.error === undefined ? null : describeError(options.error);
    const delayMs = Math.max(0, Math.round(options.delayMs ?? 0));
    return this.fenced(claim, await this.dialect.leaseRetry({ ...this.fence(claim), delayMs, error }));
  }

  /** Marks the row `dead` with `reason`; it is not attempted again. */
  async deadLetter(claim: Claim, reason: unknown): Promise<boolean> {
    return this.fenced(claim, await this.dialect.leaseDeadLetter({ ...this.fence(claim), reason: describeReason(reason) }));
  }

  /**
   * The reclaim step: returns outbox rows whose lease expired to `pending`, or to `dead` when they
   * used up `maxAttempts` (a message that crashes its worker every time cannot loop forever).
   */
  async reclaimOutbox(p: { maxAttempts: number }): Promise<ReclaimResult> {
    const result = await this.dialect.outboxReclaim(p);
    for (const counts of result.byName) this.events.emit('queuebox:reclaimed', { component: 'outbox', ...counts });
    return result;
  }

  /** The relay's reclaim step over `sources` (see `reclaimOutbox`). */
  async reclaimInbox(p: { sources: string[]; maxAttempts: number }): Promise<ReclaimResult> {
    if (p.sources.length === 0) return { pending: 0, dead: 0, byName: [] };
    const result = await this.dialect.inboxReclaim(p);
    for (const counts of result.byName) this.events.emit('queuebox:reclaimed', { component: 'inbox', ...counts });
    return result;
  }

  /**
   * Renews `claim` every third of its lease until `stop()`; aborts `keeper.signal` with a
   * `ClaimLostError` when a renewal changes nothing or fails. With `manager`, renewals run on its
   * connection, or fail once it is gone (like every statement given a manager).
   */
  keep(claim: Claim, manager?: EntityManager): LeaseKeeper {
    return this.keepOn(claim, () => manager);
  }

  /**
   * Like `keep`, with each renewal on the manager `connection()` returns at that moment (the pool
   * when it returns none). Pull workers pass their set-aside renewal connection while it is
   * connected (`RenewalConnection.managerIfConnected`).
   */
  keepOn(claim: Claim, connection: () => EntityManager | undefined): LeaseKeeper {
    return new LeaseKeeper(
      claim,
      () => this.renew(claim, connection()),
      (c) => this.markLost(c),
    );
  }

  /** Whether a fenced write (or a failed renewal) already showed this claim lost. */
  isLost(claim: Claim): boolean {
    return this.lostClaims.has(claim);
  }

  /** Records the loss of a claim once (a failed renewal counts as a loss, as the seed says). */
  markLost(claim: Claim): void {
    if (this.lostClaims.has(claim)) return;
    this.lostClaims.add(claim);
    this.events.emit('queuebox:claim-lost', { component: claim.component, id: claim.id });
  }

  private toInboxClaims(component: 'inbox' | 'pull', rows: InboxClaimedRow[], leaseMs: number): InboxClaim[] {
    return rows.map((row) => ({
      component,
      id: row.id,
      token: row.token,
      leaseMs,
      leaseExpiresAt: row.leaseExpiresAt,
      attempt: row.attempts,
      message: {
        id: row.id,
        source: row.source,
        idempotencyKey: row.idempotencyKey,
        aggregateId: row.aggregateId,
        payload: row.payload,
        headers: row.headers,
        attempt: row.attempts,
        receivedAt: row.receivedAt,
      },
    }));
  }

  private fenced(claim: Claim, changedOneRow: boolean): boolean {
    if (!changedOneRow) this.markLost(claim);
    return changedOneRow;
  }

  private fence(claim: Claim): { table: LeaseTable; id: string; token: string } {
    return { table: claim.component === 'outbox' ? 'outbox' : 'inbox', id: claim.id, token: claim.token };
  }
}

function describeReason(reason: unknown): string {
  return typeof reason === 'string' ? reason.slice(0, 2000) : describeError(reason);
}
