import { Inject, Injectable, Optional } from '@nestjs/common';
import type { DataSource, EntityManager } from 'typeorm';
import { describeError } from '../common/errors';
import { deadLetterFingerprint, errorClassOf } from '../common/fingerprint';
import { checkOwnDataSource } from '../common/own-data-source';
import { QUEUEBOX_DATA_SOURCE, QUEUEBOX_DIALECT, QUEUEBOX_IDENTITY, QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import { QueueBoxRegistry } from '../core/queuebox.registry';
import type { Dialect, FailedAttempt } from '../dialects/dialect';
import { QueueBoxStateError } from '../errors/queuebox.errors';
import { QueueBoxEvents } from '../events/queuebox.events';
import { DEFAULT_ATTEMPT_HISTORY } from '../options/options.defaults';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { messages } from '../texts/queuebox.messages';
import type { Claim, OutboxClaim } from '../types/claims';
import type { QueueBoxIdentity } from '../types/instance';
import { LeaseKeeper, type LeaseKeeperGroup } from './lease-keeper';

/** How a keeper renews its claim (`LeaseService.keep`). */
export interface KeepOptions {
  /** Renewals run on this transaction's connection, or fail once it is gone (like every statement given a manager). */
  manager?: EntityManager;
  /** Renewals go through this instead (the pull worker's set-aside connection, which sends the renewals due together as one). */
  renewer?: { renew(claim: Claim): Promise<boolean> };
  /** Renewed on the timer of the claims it was claimed with (an outbox poller's batch), not a timer of its own. */
  group?: LeaseKeeperGroup;
  /** When the statement that set the lease was sent (`performance.now()`); now when absent. */
  leaseFrom?: number;
}

/**
 * Fencing: the one place that renews, completes, retries, dead-letters and gives back claimed
 * rows, for every worker and for custom pull clients. It reads only the claim (`Claim`: table, id,
 * token, lease); what a row carries is the worker's.
 *
 * Every write is fenced (row id, state `processing`, the claim's token, a lease later than the
 * database clock) and returns whether it changed exactly one row. `false` means the claim is
 * lost: stop working on the row and change nothing more; never retry with another token. The
 * first loss of each claim is counted in `queuebox_claims_lost_total{component}`. A `manager` of
 * another QueueBox's DataSource is refused with `QueueBoxValidationError` (`field: 'manager'`).
 *
 * @example
 * const claim = await pullClient.claim('payments', { leaseMs: 30_000 });
 * if (claim && !(await lease.complete(claim))) console.warn('someone else owns it now');
 */
@Injectable()
export class LeaseService {
  private readonly lostClaims = new WeakSet<Claim>();

  constructor(
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Dialect,
    private readonly events: QueueBoxEvents,
    // Absent outside a QueueBox module (createPullClient): no other QueueBox to tell apart there.
    @Optional() @Inject(QUEUEBOX_DATA_SOURCE) private readonly dataSource?: DataSource,
    @Optional() @Inject(QUEUEBOX_IDENTITY) private readonly instance?: QueueBoxIdentity,
    @Optional() private readonly registry?: QueueBoxRegistry,
    // Absent outside a QueueBox module (createPullClient): the default history.
    @Optional() @Inject(QUEUEBOX_RESOLVED_OPTIONS) options?: Pick<ResolvedQueueBoxOptions, 'attemptHistory'> & {
      outbox?: Pick<ResolvedQueueBoxOptions['outbox'], 'sentRows'>;
    },
  ) {
    this.attemptHistory = options?.attemptHistory ?? DEFAULT_ATTEMPT_HISTORY;
    this.deleteSent = options?.outbox?.sentRows === 'delete';
  }

  /** Failed attempts each row keeps (`attemptHistory`); 0: retries and dead letters record none. */
  private readonly attemptHistory: number;
  /** `outbox.sentRows: 'delete'`: an outbox completion deletes the row instead of marking it `sent`. */
  private readonly deleteSent: boolean;

  /**
   * @deprecated Removed in 0.2.0: claims come from `PullClient.claim(source, { leaseMs, maxAttempts? })`
   * (inject `PullClient`, or `createPullClient(dataSource)` outside Nest). Throws `QueueBoxStateError` naming it.
   */
  async claim(_source: string, _options: { leaseMs: number; maxAttempts?: number }): Promise<never> {
    throw new QueueBoxStateError(messages.leaseClaimRemoved());
  }

  /** Extends the lease by `claim.leaseMs` from the database's current time (on `manager`'s connection when given). */
  async renew(claim: Claim, manager?: EntityManager): Promise<boolean> {
    this.checkManager(manager, 'LeaseService.renew');
    const expires = await this.dialect.leaseRenew({ ...this.fence(claim), leaseMs: claim.leaseMs, manager });
    if (expires) claim.leaseExpiresAt = expires;
    return this.fenced(claim, expires !== null);
  }

  /**
   * @internal Renews many claims of one table with one fenced statement, each by its own lease (on
   * `manager`'s connection when given). Returns the claims that kept their claim; every other one
   * is lost (and counted). The pull workers' renewal connection sends the renewals due together
   * through it.
   */
  async renewBatch<C extends Claim>(claims: readonly C[], manager?: EntityManager): Promise<Set<C>> {
    const kept = new Set<C>();
    if (claims.length === 0) return kept;
    const renewed = await this.dialect.leaseRenewBatch({ table: claims[0].table, claims, manager });
    const expiries = new Map(renewed.map((r) => [`${r.id}/${r.token}`, r.leaseExpiresAt]));
    for (const claim of claims) {
      const expires = expiries.get(`${claim.id}/${claim.token}`);
      if (!this.fenced(claim, expires !== undefined)) continue;
      claim.leaseExpiresAt = expires as Date;
      kept.add(claim);
    }
    return kept;
  }

  /**
   * Marks the row `sent` (outbox) or `processed` (inbox), or deletes an outbox row with
   * `outbox.sentRows: 'delete'`; inside `manager`'s transaction when given.
   */
  async complete(claim: Claim, manager?: EntityManager): Promise<boolean> {
    this.checkManager(manager, 'LeaseService.complete');
    const deleteRow = claim.table === 'outbox' && this.deleteSent;
    return this.fenced(claim, await this.dialect.leaseComplete({ ...this.fence(claim), manager, deleteRow }));
  }

  /**
   * Completes claimed outbox heads and the followers published after each (issue 36), in one
   * statement: each head under its fence, its followers (rows of its key after it, read while it
   * was held) with it, each only while still pending. Returns the heads whose fence held (any
   * other is lost, and counted: none of its followers changed) and the ids of the followers it
   * finished.
   */
  async completeWithFollowers(
    batch: readonly { head: OutboxClaim; followerIds: readonly string[] }[],
  ): Promise<{ heads: Set<OutboxClaim>; followers: Set<string> }> {
    const done = await this.dialect.outboxCompleteWithFollowers({
      heads: batch.map(({ head }) => head),
      followers: batch.flatMap(({ head, followerIds }) => followerIds.map((id) => ({ id, headId: head.id }))),
      deleteRows: this.deleteSent,
    });
    const heads = new Set<OutboxClaim>();
    for (const { head } of batch) if (this.fenced(head, done.heads.has(head.id))) heads.add(head);
    return { heads, followers: done.followers };
  }

  /**
   * Completes many claims (all of one table) with one fenced statement. Returns the claims that
   * changed a row; every other one is lost (and counted). With `manager`, in that transaction, so
   * the completions commit with the work done in it (or throws `TransactionLostError`).
   */
  async completeBatch<C extends Claim>(claims: readonly C[], manager?: EntityManager): Promise<Set<C>> {
    this.checkManager(manager, 'LeaseService.completeBatch');
    const completed = new Set<C>();
    if (claims.length === 0) return completed;
    // The claims are what the dialect reads (`id`, `token`): no copy of each.
    const table = claims[0].table;
    const done = await this.dialect.leaseCompleteBatch({ table, claims, manager, deleteRows: table === 'outbox' && this.deleteSent });
    for (const claim of claims) if (this.fenced(claim, done.has(claim.id))) completed.add(claim);
    return completed;
  }

  /** Gives back a claim whose work never started (on shutdown): `pending` again, its attempt not counted. */
  async release(claim: Claim): Promise<boolean> {
    return this.fenced(claim, await this.dialect.leaseRelease(this.fence(claim)));
  }

  /**
   * Puts a claim's work off without charging its attempt (a rate limit had no token for it):
   * `pending` again, to be claimed after `delayMs`; `last_error` is left as it was.
   */
  async defer(claim: Claim, delayMs: number): Promise<boolean> {
    return this.fenced(claim, await this.dialect.leaseDefer({ ...this.fence(claim), delayMs: Math.max(0, Math.round(delayMs)) }));
  }

  /**
   * Returns the row to `pending`, to be claimed again after `delayMs` (default 0), recording
   * `error` in `last_error` and, in the same statement, in the row's attempt history
   * (`attemptHistory`, when an `error` is given).
   */
  async retry(claim: Claim, options: { delayMs?: number; error?: unknown } = {}): Promise<boolean> {
    const error = options.error === undefined ? null : describeError(options.error);
    const delayMs = Math.max(0, Math.round(options.delayMs ?? 0));
    const attempt = error === null ? undefined : this.failedAttempt(options.error, error);
    return this.fenced(claim, await this.dialect.leaseRetry({ ...this.fence(claim), delayMs, error, attempt }));
  }

  /**
   * Marks the row `dead` with `reason`; it is not attempted again. Its fingerprint (its dead-letter
   * group) is taken from `options.failure` when given (the error of the attempt that failed, also
   * recorded in the attempt history), else from `reason`; `options.errorClass` names the class
   * when there is no failure object (a lease that expired).
   */
  async deadLetter(claim: Claim, reason: unknown, options: { failure?: unknown; errorClass?: string } = {}): Promise<boolean> {
    const text = describeReason(reason);
    const hasFailure = Object.hasOwn(options, 'failure');
    const cause = hasFailure ? options.failure : reason;
    const described = hasFailure || typeof reason !== 'string' ? describeError(cause) : text;
    const errorClass = options.errorClass ?? errorClassOf(cause);
    const fingerprint = deadLetterFingerprint(errorClass, described);
    const attempt = this.attemptHistory > 0 ? { error: described, errorClass, keep: this.attemptHistory } : undefined;
    return this.fenced(claim, await this.dialect.leaseDeadLetter({ ...this.fence(claim), reason: text, fingerprint, attempt }));
  }

  private failedAttempt(failure: unknown, error: string): FailedAttempt | undefined {
    return this.attemptHistory > 0 ? { error, errorClass: errorClassOf(failure), keep: this.attemptHistory } : undefined;
  }

  /**
   * Renews `claim` every third of its lease until `stop()`; aborts `keeper.signal` with a
   * `ClaimLostError` when a renewal changes nothing or fails. The only maker of keepers: every
   * worker's claims and your pull client's are kept here. `keep(claim, manager)` is still accepted
   * for `keep(claim, { manager })`.
   */
  keep(claim: Claim, options: KeepOptions | EntityManager = {}): LeaseKeeper {
    const { manager, renewer, group, leaseFrom } = isEntityManager(options) ? { manager: options } : (options as KeepOptions);
    // The common keeper (pool renewals) shares this service's two callbacks: none made per claim.
    const renew = renewer ? (c: Claim) => renewer.renew(c) : manager ? (c: Claim) => this.renew(c, manager) : this.renewOnPool;
    return new LeaseKeeper(claim, renew, this.onLost, group, leaseFrom);
  }

  private readonly renewOnPool = (claim: Claim) => this.renew(claim);
  private readonly onLost = (claim: Claim) => this.markLost(claim);

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

  private fenced(claim: Claim, changedOneRow: boolean): boolean {
    if (!changedOneRow) this.markLost(claim);
    return changedOneRow;
  }

  /**
   * A transaction of another QueueBox's DataSource (I12) would run the fenced write against that
   * database's table: zero rows, a claim counted lost, and the work done in that transaction
   * committed while this row waits for its lease to expire and is done again.
   */
  private checkManager(manager: EntityManager | undefined, call: string): void {
    if (!manager || this.instance === undefined || this.dataSource === undefined) return;
    const { name, dataSource: dataSourceName } = this.instance;
    checkOwnDataSource(manager, call, { name, dataSourceName, dataSource: this.dataSource }, this.registry);
  }

  private fence(claim: Claim): Pick<Claim, 'table' | 'id' | 'token'> {
    return { table: claim.table, id: claim.id, token: claim.token };
  }
}

/** A TypeORM `EntityManager` (the form `keep(claim, manager)` of earlier releases), told from `KeepOptions` by its own fields. */
function isEntityManager(value: object): value is EntityManager {
  return 'connection' in value && 'transaction' in value;
}

function describeReason(reason: unknown): string {
  return typeof reason === 'string' ? reason.slice(0, 2000) : describeError(reason);
}
