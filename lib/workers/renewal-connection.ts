// Worker runtime: the connection set aside for lease renewals, so they never queue behind handler
// transactions for the pool. Used by PullWorker (its claims' renewals) and, through it, by the
// instance's heartbeat.

import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import { withinTimeout } from '../common/time-limit';
import { QueueBoxError } from '../errors/queuebox.errors';
import type { LeaseService } from '../lease/lease.service';
import { messages } from '../texts/queuebox.messages';
import type { Claim } from '../types/claims';
import { TurnBatcher } from './turn-batcher';

/** Most claims one renewal statement renews. */
const MAX_BATCH = 1000;

/**
 * One connection set aside for lease renewals, so a renewal never waits behind handler
 * transactions for the pool. Renewals are the one place where "this connection if it is still
 * there, else the pool" is right: a renewal is a write of its own (never part of a caller's
 * transaction), so running it elsewhere changes nothing it means. When the connection broke,
 * renewals go through the pool while a replacement connects in the background.
 *
 * It runs one statement at a time: a connection given a query while it still runs another queues
 * it (node-postgres 8 with a deprecation warning; 9 throws). The renewals due while a statement
 * runs (every claim of one claim statement is due at the same moment) go together in the next
 * one, one fenced statement for all of them (`LeaseService.renewBatch`), so they wait behind no
 * more than one statement, however many claims are held.
 *
 * A statement on it is bounded by `timeoutMs` (QueueBox's statement bound), as renewals through
 * the pool are: one that gets no answer by then fails (the renewal counts as failed), and the
 * connection is set aside for good (released once its statement ends, or when the DataSource
 * closes) while a replacement connects. Unbounded, a renewal sent into a silent partition held
 * every later renewal behind it, and shutdown, which waits for the last one.
 */
export class RenewalConnection {
  private runner?: QueryRunner;
  private replacing?: Promise<void>;
  private closed = false;
  /** The work handed to the connection last, settled or not: the next starts when it ends. */
  private last: Promise<unknown> = Promise.resolve();
  private readonly renewals: TurnBatcher<Claim, boolean>;

  constructor(
    private readonly dataSource: DataSource,
    lease: LeaseService,
    private readonly timeoutMs?: number,
  ) {
    this.renewals = new TurnBatcher(MAX_BATCH, async (claims) => {
      const renewed = await this.run((manager) => lease.renewBatch(claims, manager));
      return claims.map((claim) => renewed.has(claim));
    });
  }

  /** Connects the set-aside connection (takes one connection of the pool until `close()`). */
  async open(): Promise<void> {
    this.closed = false;
    const runner = this.dataSource.createQueryRunner();
    await runner.connect();
    this.runner = runner;
  }

  /** Renews `claim` with every renewal due with it, in one statement; whether it kept its claim (a lost one is counted). */
  renew(claim: Claim): Promise<boolean> {
    return this.renewals.add(claim);
  }

  /**
   * Runs `work` with the set-aside connection's manager (`undefined`, the pool, once it broke or
   * closed) when the work handed to it before has ended: `work` sends one statement at a time.
   */
  run<T>(work: (manager: EntityManager | undefined) => Promise<T>): Promise<T> {
    const turn = this.last.then(() => this.bounded(work));
    this.last = turn.catch(() => undefined);
    return turn;
  }

  /** `work` on the connection while connected, failing after `timeoutMs` (see the class); through the pool (bounded there) otherwise. */
  private bounded<T>(work: (manager: EntityManager | undefined) => Promise<T>): Promise<T> {
    const manager = this.managerIfConnected();
    const running = work(manager);
    const runner = this.runner;
    if (!manager || !runner || this.timeoutMs === undefined) return running;
    const timeoutMs = this.timeoutMs;
    return withinTimeout(
      running,
      timeoutMs,
      () => new QueueBoxError('QUEUEBOX_QUERY_TIMEOUT', messages.queryTimedOut(timeoutMs)),
      (_error, settled) => this.setAside(runner, settled),
    );
  }

  /** Stops using `runner`, whose statement got no answer in time: released once it ended; the next work goes to a replacement. */
  private setAside(runner: QueryRunner, settled: Promise<void>): void {
    if (this.runner === runner) this.runner = undefined;
    void settled.then(() => (runner.isReleased ? undefined : runner.release())).catch(() => undefined);
  }

  /**
   * Releases the connection once the work handed to it has ended (a connection released under a
   * statement would go back to the pool still running it); work that starts later goes to the
   * pool. A replacement still connecting releases itself when it gets one (not awaited: it may
   * wait for the pool).
   */
  async close(): Promise<void> {
    this.closed = true;
    await this.last;
    const runner = this.runner;
    this.runner = undefined;
    if (runner && !runner.isReleased) await runner.release();
  }

  /** The set-aside connection's manager while it is connected and not closing; `undefined` (the pool) otherwise. */
  private managerIfConnected(): EntityManager | undefined {
    if (this.closed) return undefined;
    const runner = this.runner;
    if (runner && !runner.isReleased) return runner.manager;
    this.replace();
    return undefined;
  }

  private replace(): void {
    this.replacing ??= (async () => {
      const runner = this.dataSource.createQueryRunner();
      try {
        await runner.connect();
      } catch {
        return; // the next renewal tries again
      }
      if (this.closed) await runner.release();
      else this.runner = runner;
    })()
      .catch(() => undefined)
      .finally(() => {
        this.replacing = undefined;
      });
  }
}
