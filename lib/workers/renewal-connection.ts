// Worker runtime: the connection set aside for lease renewals, so they never queue behind handler
// transactions for the pool. Used by PullWorker.

import type { DataSource, EntityManager, QueryRunner } from 'typeorm';

/**
 * One connection set aside for lease renewals, so a renewal never waits behind handler
 * transactions for the pool. Renewals are the one place where "this connection if it is still
 * there, else the pool" is right: a renewal is a write of its own (never part of a caller's
 * transaction), so running it elsewhere changes nothing it means. When the connection broke,
 * renewals go through the pool while a replacement connects in the background.
 */
export class RenewalConnection {
  private runner?: QueryRunner;
  private replacing?: Promise<void>;
  private closed = false;

  constructor(private readonly dataSource: DataSource) {}

  /** Connects the set-aside connection (takes one connection of the pool until `close()`). */
  async open(): Promise<void> {
    this.closed = false;
    const runner = this.dataSource.createQueryRunner();
    await runner.connect();
    this.runner = runner;
  }

  /** The set-aside connection's manager while it is connected; `undefined` (the pool) once it broke. */
  managerIfConnected(): EntityManager | undefined {
    const runner = this.runner;
    if (runner && !runner.isReleased) return runner.manager;
    if (!this.closed) this.replace();
    return undefined;
  }

  /** Releases the connection. A replacement still connecting releases itself when it gets one (not awaited: it may wait for the pool). */
  async close(): Promise<void> {
    this.closed = true;
    const runner = this.runner;
    this.runner = undefined;
    if (runner && !runner.isReleased) await runner.release();
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
