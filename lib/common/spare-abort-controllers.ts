import { getEventListeners } from 'node:events';

/** How many own keys an untouched signal has (Node.js internals; compared, never interpreted). */
let freshSignalKeys: number | undefined;

/**
 * AbortControllers of settled work whose signal nobody used, for the next work. On Node.js 20 an
 * `AbortSignal` is costly to create and, unlike most short-lived objects, outlives the young
 * generation: one per publish was half of what a drain promoted to the old space (about 0.6 KB a
 * message, never collected while the heap has room). A controller is taken back only when its
 * signal never aborted, has no `abort` listener left and gained no state (`AbortSignal.any()`
 * makes it a source, an expando property): then nothing can tell it from a new one, except a
 * caller that kept the signal after its work settled.
 */
export class SpareAbortControllers {
  private readonly spare: AbortController[] = [];

  constructor(private readonly max: number) {}

  take(): AbortController {
    return this.spare.pop() ?? new AbortController();
  }

  /** Keeps `controller` for a later `take()` if its signal is as good as new; else drops it. */
  giveBack(controller: AbortController): void {
    if (this.spare.length >= this.max) return;
    const { signal } = controller;
    if (signal.aborted || getEventListeners(signal, 'abort').length > 0) return;
    freshSignalKeys ??= Reflect.ownKeys(new AbortController().signal).length;
    if (Reflect.ownKeys(signal).length !== freshSignalKeys) return;
    this.spare.push(controller);
  }
}
