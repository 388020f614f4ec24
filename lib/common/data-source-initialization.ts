import type { DataSource } from 'typeorm';

interface Followed {
  /** `initialize()` calls begun and not yet settled. */
  inFlight: number;
  readonly listeners: Set<() => void>;
}

const followed = new WeakMap<DataSource, Followed>();

/** What `followInitialization` gives its caller. */
export interface Initialization {
  /** Initialized, and no `initialize()` call still runs its migrations. */
  done(): boolean;
  /** Stops calling `onSettled`. */
  stop(): void;
}

/**
 * Follows a DataSource that was not initialized when QueueBox was built (TypeORM's
 * `manualInitialization`, or a DataSource object the application initializes later), and calls
 * `onSettled` whenever an `initialize()` call ends. TypeORM reports `isInitialized` as soon as it
 * has connected, before it runs the migrations of `migrationsRun`: a schema checked at that moment
 * would look unmigrated. So `initialize` is wrapped (once per DataSource, however many QueueBoxes
 * follow it) to know when a call is still running; a call begun before the wrap is seen by
 * `isInitialized` alone.
 *
 * @example
 * const initialization = followInitialization(dataSource, () => waker.wake());
 * while (!initialization.done()) await waker.sleep(heartbeatMs);
 */
export function followInitialization(dataSource: DataSource, onSettled: () => void): Initialization {
  let state = followed.get(dataSource);
  if (!state) {
    const calls: Followed = { inFlight: 0, listeners: new Set() };
    const initialize = dataSource.initialize;
    dataSource.initialize = async function (this: DataSource) {
      calls.inFlight++;
      try {
        return await initialize.call(this);
      } finally {
        calls.inFlight--;
        for (const listener of [...calls.listeners]) listener();
      }
    };
    followed.set(dataSource, calls);
    state = calls;
  }
  const calls = state;
  calls.listeners.add(onSettled);
  return {
    done: () => dataSource.isInitialized && calls.inFlight === 0,
    stop: () => calls.listeners.delete(onSettled),
  };
}
