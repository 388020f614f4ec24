import type {
  DataSource,
  EntityManager,
  EntitySubscriberInterface,
  QueryRunner,
  TransactionCommitEvent,
  TransactionRollbackEvent,
} from 'typeorm';

interface Deferred {
  /** The transaction depth (1 = outermost, more inside savepoints) at which it was deferred. */
  depth: number;
  run: () => void;
}

/**
 * Runs work after the transaction of a caller's `EntityManager` commits, and drops it when that
 * transaction rolls back: a wake-up or an event about a row must not precede the row's commit,
 * nor survive its rollback. Without a transaction the work runs at once. Savepoints count: work
 * deferred inside a nested transaction is dropped when that nested transaction rolls back, and
 * runs only when the outermost one commits. (TypeORM's SQL Server runner announces no rollback of a
 * savepoint: there, work of a rolled-back savepoint still runs when the outer transaction commits.)
 */
export class AfterCommit implements EntitySubscriberInterface {
  private readonly deferred = new WeakMap<QueryRunner, Deferred[]>();

  constructor(private readonly dataSource: DataSource) {
    // A DataSource reads its subscribers on every broadcast, so one added now takes part.
    (dataSource.subscribers as EntitySubscriberInterface[]).push(this);
  }

  /** Stops listening (the application is closing). */
  detach(): void {
    const subscribers = this.dataSource.subscribers as EntitySubscriberInterface[];
    const index = subscribers.indexOf(this);
    if (index >= 0) subscribers.splice(index, 1);
  }

  /** Runs `run` now, or when `manager`'s transaction commits (never if it rolls back). */
  schedule(manager: EntityManager | undefined, run: () => void): void {
    const runner = manager?.queryRunner;
    if (!runner?.isTransactionActive) {
      run();
      return;
    }
    const list = this.deferred.get(runner) ?? [];
    list.push({ depth: depthOf(runner), run });
    this.deferred.set(runner, list);
  }

  afterTransactionCommit(event: TransactionCommitEvent): void {
    const runner = event.queryRunner;
    if (runner.isTransactionActive) return; // a savepoint was released: its work now belongs to the enclosing transaction
    const list = this.deferred.get(runner);
    this.deferred.delete(runner);
    for (const item of list ?? []) item.run();
  }

  afterTransactionRollback(event: TransactionRollbackEvent): void {
    const runner = event.queryRunner;
    const list = this.deferred.get(runner);
    if (!list) return;
    const kept = runner.isTransactionActive ? list.filter((item) => item.depth <= depthOf(runner)) : [];
    if (kept.length > 0) this.deferred.set(runner, kept);
    else this.deferred.delete(runner);
  }
}

/** How deep in nested transactions the runner is; TypeORM keeps it in a protected field. */
function depthOf(runner: QueryRunner): number {
  return (runner as unknown as { transactionDepth?: number }).transactionDepth ?? 1;
}
