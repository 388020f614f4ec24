import type { DataSource, EntityManager } from 'typeorm';

// Ambient transactions: the transaction `@nestjs-cls/transactional` keeps for the current call
// chain (`@Transactional()`, `TransactionHost.withTransaction`), found for one DataSource. The
// package and its TypeORM adapter are optional peers, loaded on first use. Only their public API is
// read: each `TransactionHost` instance (found among the application's providers), its `tx` (the
// active transaction's EntityManager, or the adapter's fallback `dataSource.manager` when none is
// active: either way its `connection` tells which DataSource the host serves, however the plugin's
// `connectionName` was spelled), `isTransactionActive()` and `withTransaction(propagation, options, fn)`.

/** The part of a `TransactionHost` QueueBox uses. */
interface TransactionHostLike {
  readonly tx: unknown;
  isTransactionActive(): boolean;
  withTransaction<R>(propagation: string, options: { isolationLevel?: string }, fn: () => Promise<R>): Promise<R>;
}

interface TransactionalPackage {
  TransactionHost: abstract new (...args: never[]) => unknown;
  Propagation: { RequiresNew: string };
}

/** The package name, for messages. */
export const TRANSACTIONAL_PACKAGE = '@nestjs-cls/transactional';

let loaded: TransactionalPackage | null | undefined;

/** `@nestjs-cls/transactional` when the application has it installed, loaded on first use. */
export function transactionalPackage(): TransactionalPackage | null {
  if (loaded === undefined) {
    try {
      loaded = require(TRANSACTIONAL_PACKAGE) as TransactionalPackage;
    } catch {
      loaded = null;
    }
  }
  return loaded;
}

function managerOf(value: unknown): EntityManager | undefined {
  const manager = value as Partial<EntityManager> | null | undefined;
  return typeof manager === 'object' && manager !== null && typeof manager.query === 'function' ? (manager as EntityManager) : undefined;
}

/** What is active now: a transaction of this DataSource, or of others only (none when neither). */
export interface ActiveTransactions {
  own?: EntityManager;
  /** Active transactions of other DataSources (for the I12 check: one of another QueueBox's is refused). */
  others: EntityManager[];
}

/**
 * The ambient transactions of one QueueBox's DataSource. `providers` lists the application's
 * provider instances (Nest's `DiscoveryService`); the TransactionHosts among them are found on
 * first use, when every provider exists.
 */
export class AmbientTransactions {
  private hosts?: TransactionHostLike[];

  constructor(
    private readonly dataSource: DataSource,
    private readonly providers: () => Iterable<unknown>,
  ) {}

  /** Whether `@nestjs-cls/transactional` is installed (where QueueBox resolves packages from). */
  get installed(): boolean {
    return transactionalPackage() !== null;
  }

  private allHosts(): TransactionHostLike[] {
    if (this.hosts) return this.hosts;
    const found = transactionalPackage();
    if (!found) return [];
    const hosts = new Set<TransactionHostLike>();
    for (const instance of this.providers()) {
      if (instance instanceof found.TransactionHost) hosts.add(instance as unknown as TransactionHostLike);
    }
    this.hosts = [...hosts];
    return this.hosts;
  }

  /** The hosts whose transactions are this DataSource's. */
  private ownHosts(): TransactionHostLike[] {
    return this.allHosts().filter((host) => managerOf(host.tx)?.connection === this.dataSource);
  }

  /** Whether a `TransactionHost` serves this DataSource (so its transactions can be ambient). */
  get served(): boolean {
    return this.ownHosts().length > 0;
  }

  /** The transactions active in the current call chain, this DataSource's first. */
  active(): ActiveTransactions {
    const result: ActiveTransactions = { others: [] };
    for (const host of this.allHosts()) {
      if (!host.isTransactionActive()) continue;
      const manager = managerOf(host.tx);
      if (!manager) continue;
      if (manager.connection === this.dataSource) result.own ??= manager;
      else result.others.push(manager);
    }
    return result;
  }

  /**
   * Runs `work` in a new transaction that is also the ambient one while it runs (a pull handler's:
   * services it calls that use `TransactionHost.tx`, `@Transactional()` or `enqueue(msg)` join it),
   * at READ COMMITTED, through the host of this DataSource (`Propagation.RequiresNew`). Without
   * one, `open` runs it (QueueBox's own transaction).
   */
  run<T>(work: (manager: EntityManager) => Promise<T>, open: (work: (manager: EntityManager) => Promise<T>) => Promise<T>): Promise<T> {
    const found = transactionalPackage();
    const [host] = found ? this.ownHosts() : [];
    if (!found || !host) return open(work);
    return host.withTransaction(found.Propagation.RequiresNew, { isolationLevel: 'READ COMMITTED' }, () =>
      work(managerOf(host.tx) as EntityManager),
    );
  }
}
