import { Inject, Injectable, Logger } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import { describeError } from '../common/errors';
import type { Dialect, InboxClaimedRow } from '../dialects/dialect';
import type { ReclaimResult } from '../dialects/dialect-rows';
import { byId } from '../dialects/records';
import { QueueBoxValidationError } from '../errors/queuebox.errors';
import { QueueBoxEvents } from '../events/queuebox.events';
import { MAX_LEASE_MS, MIN_LEASE_MS } from '../options/options.defaults';
import { isSourceName } from '../options/options.resolver';
import { QUEUEBOX_DIALECT } from '../queuebox.constants';
import { messages } from '../queuebox.messages';
import { LeaseKeeper } from '../workers/lease-keeper';
import { inboxMessageOf, outboundMessageOf } from './claimed-messages';
import type { Claim, InboxClaim, OutboxClaim, WorkerClaim } from './lease.types';

const SOURCE_RULE = 'must be a source name: 1 to 128 letters, digits, ".", "_" or "-", starting with a letter or digit';

/** A follower changed between its read and its completion (`LeaseService.completeFollowers`): nothing of its transaction may commit. */
export class FollowersChangedError extends Error {}

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
  private readonly logger = new Logger('QueueBox:LeaseService');

  constructor(
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Dialect,
    private readonly events: QueueBoxEvents,
  ) {}

  /** Claims up to `limit` outbox rows, at most one per key, each with a lease of `leaseMs` by the database clock. */
  async claimOutboxBatch(p: { limit: number; leaseMs: number }): Promise<OutboxClaim[]> {
    const rows = await this.dialect.outboxClaimBatch(p);
    return rows.map((row) => claimOf({ component: 'outbox', table: 'outbox' }, row, p.leaseMs, outboundMessageOf(row)));
  }

  /**
   * Claims the next message of `source` for a custom pull client, or returns `null` when there is
   * none. Takes a pending row or one whose lease expired, at most one per aggregate in flight.
   * Finish it with `complete(claim, manager)` in your transaction (or `retry` / `deadLetter`);
   * keep it alive with `renew(claim)` (or `keep(claim)`) while you work. With `maxAttempts`, a
   * message claimed for an attempt beyond it (every earlier claim expired: your client crashed or
   * hung on it) is dead-lettered instead of returned, and the next one is claimed; without it
   * such a message is returned however often its claims expired.
   *
   * @example
   * const claim = await lease.claim('payments', { leaseMs: 30_000, maxAttempts: 10 });
   * if (claim) await dataSource.transaction(async (manager) => {
   *   await applyPayment(manager, claim.message.payload);
   *   if (!(await lease.complete(claim, manager))) throw new Error('claim lost: roll back');
   * });
   */
  async claim(source: string, options: { leaseMs: number; maxAttempts?: number }): Promise<InboxClaim | null> {
    checkPullClaim('LeaseService.claim', { source, limit: 1, ...options });
    for (;;) {
      const [claimed] = await this.dialect.inboxPullClaimBatch({ source, limit: 1, leaseMs: options.leaseMs });
      if (!claimed) return null;
      const [claim] = await this.liveClaims([pullClaimOf(claimed, options.leaseMs)], options.maxAttempts);
      // A claim that used up its attempts is dead now: look for the next message.
      if (claim) return claim;
    }
  }

  /**
   * A pull claim of up to `limit` rows of `source` (what `claim` does for one). With
   * `maxAttempts`, a row claimed for an attempt beyond it (its earlier claims expired: the worker
   * crashed or hung on it every time) is dead-lettered under the new claim and not returned.
   */
  async claimPullBatch(p: { source: string; limit: number; leaseMs: number; maxAttempts?: number }): Promise<InboxClaim[]> {
    checkPullClaim('LeaseService.claimPullBatch', p);
    const claims = (await this.dialect.inboxPullClaimBatch(p)).map((row) => pullClaimOf(row, p.leaseMs));
    return this.liveClaims(claims, p.maxAttempts);
  }

  /** The inbox relay's claim: up to `limit` rows of `sources`, at most one per (source, aggregate). */
  async claimRelayBatch(p: { sources: string[]; limit: number; leaseMs: number }): Promise<InboxClaim[]> {
    if (p.sources.length === 0) return [];
    const rows = await this.dialect.inboxRelayClaimBatch(p);
    return rows.map((row) => claimOf({ component: 'inbox', table: 'inbox' }, row, p.leaseMs, inboxMessageOf(row)));
  }

  /**
   * The followers of inbox `heads` (batch pull handlers, the inbox relay): up to `room` pending
   * rows that come right after the heads of their aggregates (at most `maxPerHead` for one head),
   * read in `manager`'s transaction when given, spread over the heads and cut at each aggregate's
   * first row that is not yet due.
   * A follower is not claimed: it rides on its head's claim (its `token` and lease are the
   * head's), since no claim takes a row of an aggregate while its head is in flight. Complete
   * followers with `completeFollowers` after their heads' fenced completion, in the same
   * transaction: that completion is what fences them. Returned by head, in id order.
   */
  async followers(
    heads: readonly InboxClaim[],
    p: { room: number; maxPerHead?: number; manager?: EntityManager },
  ): Promise<Map<InboxClaim, InboxClaim[]>> {
    const byHead = new Map<InboxClaim, InboxClaim[]>();
    const keyed = heads.filter((head) => head.message.aggregateId !== null);
    if (keyed.length === 0 || p.room < 1) return byHead;
    const rows = await this.dialect.inboxFollowers({
      heads: keyed.map((head) => ({ id: head.id, source: head.message.source, aggregateId: head.message.aggregateId as string })),
      perHead: Math.min(Math.ceil(p.room / keyed.length), p.maxPerHead ?? Number.POSITIVE_INFINITY),
      manager: p.manager,
    });
    // Per head, its rows up to the first that is not due, ranked by their place behind the head;
    // the room goes to the lowest ranks first, so every aggregate gets its share.
    const headById = new Map(keyed.map((head) => [head.id, head]));
    const ranked: { rank: number; row: (typeof rows)[number] }[] = [];
    const stopped = new Set<string>();
    const taken = new Map<string, number>();
    for (const row of rows) {
      if (stopped.has(row.headId)) continue;
      if (!row.due) {
        stopped.add(row.headId);
        continue;
      }
      const rank = taken.get(row.headId) ?? 0;
      taken.set(row.headId, rank + 1);
      ranked.push({ rank, row });
    }
    ranked.sort((a, b) => a.rank - b.rank || byId(a.row, b.row));
    for (const { row } of ranked.slice(0, p.room).sort((a, b) => byId(a.row, b.row))) {
      const head = headById.get(row.headId) as InboxClaim;
      const follower: InboxClaim = {
        component: head.component,
        table: 'inbox',
        id: row.id,
        headId: head.id,
        token: head.token,
        leaseMs: head.leaseMs,
        leaseExpiresAt: head.leaseExpiresAt,
        attempt: row.attempts + 1,
        message: inboxMessageOf({ ...row, attempts: row.attempts + 1 }),
      };
      const list = byHead.get(head);
      if (list) list.push(follower);
      else byHead.set(head, [follower]);
    }
    return byHead;
  }

  /**
   * Marks `followers` processed in `manager`'s transaction, after their heads' `completeBatch`;
   * fenced by the heads: a follower changes only if its head is `processed` under the head's token
   * (the completion in this transaction). Throws `FollowersChangedError` when one was no longer
   * pending (an operator's write since it was read) or its head is not completed under that
   * token: the caller's transaction must roll back.
   */
  async completeFollowers(followers: readonly InboxClaim[], manager: EntityManager): Promise<void> {
    if (followers.length === 0) return;
    const done = await this.dialect.inboxCompleteFollowers({
      followers: followers.map((follower) => ({ id: follower.id, headId: follower.headId ?? follower.id, headToken: follower.token })),
      manager,
    });
    if (done.size < followers.length) throw new FollowersChangedError();
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
   * changed a row; every other one is lost (and counted). With `manager`, in that transaction, so
   * the completions commit with the work done in it (or throws `TransactionLostError`).
   */
  async completeBatch(claims: readonly Claim[], manager?: EntityManager): Promise<Set<Claim>> {
    if (claims.length === 0) return new Set();
    const done = await this.dialect.leaseCompleteBatch({
      table: claims[0].table,
      claims: claims.map((c) => ({ id: c.id, token: c.token })),
      manager,
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

  /**
   * The pull claim statement takes expired rows directly, so pull has no reclaim step to end a
   * message that kills its worker every time (I8): a claim beyond `maxAttempts` is that step. It
   * is dead-lettered, fenced by its own fresh token, before any handler sees it.
   */
  private async liveClaims(claims: InboxClaim[], maxAttempts: number | undefined): Promise<InboxClaim[]> {
    if (maxAttempts === undefined || claims.every((claim) => claim.attempt <= maxAttempts)) return claims;
    const spent = claims.filter((claim) => claim.attempt > maxAttempts);
    await Promise.all(spent.map((claim) => this.deadLetterSpent(claim, maxAttempts)));
    return claims.filter((claim) => claim.attempt <= maxAttempts);
  }

  private async deadLetterSpent(claim: InboxClaim, maxAttempts: number): Promise<void> {
    const { message } = claim;
    const id = `${message.source}/${message.idempotencyKey}`;
    const reason = messages.pullAttemptsExpired(claim.attempt - 1, maxAttempts);
    try {
      if (await this.deadLetter(claim, reason)) {
        this.events.emit('queuebox:reclaimed', { component: 'pull', name: message.source, pending: 0, dead: 1 });
        this.logger.warn(messages.deadLettered(id, reason));
      } else {
        this.logger.warn(messages.finishLost(id, 'dead-letter'));
      }
    } catch (error) {
      // The row stays processing under this claim; the next claim after its lease tries again.
      this.logger.error(messages.finishFailed(id, 'dead-letter', describeError(error)));
    }
  }

  private fenced(claim: Claim, changedOneRow: boolean): boolean {
    if (!changedOneRow) this.markLost(claim);
    return changedOneRow;
  }

  private fence(claim: Claim): Pick<Claim, 'table' | 'id' | 'token'> {
    return { table: claim.table, id: claim.id, token: claim.token };
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
  const integer = (field: string, value: unknown, min: number, max: number) => {
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
      throw new QueueBoxValidationError(
        field,
        messages.leaseArgumentInvalid(where, field, `must be an integer from ${min} to ${max}`, value),
      );
    }
  };
  integer('leaseMs', p.leaseMs, MIN_LEASE_MS, MAX_LEASE_MS);
  integer('limit', p.limit, 1, 10_000);
  if (p.maxAttempts !== undefined) integer('maxAttempts', p.maxAttempts, 1, 1_000_000);
}

/** A claim of `row` (a claimed row: id, token, lease end, attempts) carrying `message`. */
function claimOf<C extends Pick<Claim, 'component' | 'table'>, M>(
  owner: C,
  row: { id: string; token: string; leaseExpiresAt: Date; attempts: number },
  leaseMs: number,
  message: M,
): C & WorkerClaim<M> {
  return { ...owner, id: row.id, token: row.token, leaseMs, leaseExpiresAt: row.leaseExpiresAt, attempt: row.attempts, message };
}

function pullClaimOf(row: InboxClaimedRow, leaseMs: number): InboxClaim {
  return claimOf({ component: 'pull', table: 'inbox' }, row, leaseMs, inboxMessageOf(row));
}

function describeReason(reason: unknown): string {
  return typeof reason === 'string' ? reason.slice(0, 2000) : describeError(reason);
}
