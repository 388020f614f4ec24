// Worker runtime: the destinations and sources an operator paused (issue 40), as this process's
// claims read them. The pauses live in the database (migration 010), so every replica honours a
// pause; each process reads the whole (tiny) table at most once per poll interval of the loop that
// asks, and all its loops share that read.

import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { QUEUEBOX_DIALECT, QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import type { Dialect } from '../dialects/dialect';
import type { PauseRow } from '../dialects/dialect-rows';
import { DEFAULT_POLL_INTERVAL_MS } from '../options/options.defaults';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { messages } from '../texts/queuebox.messages';
import type { QueueTable } from '../types/claims';

/** One read of the pauses table: when it was read (`performance.now()`), and the names by component. */
interface PauseRead {
  at: number;
  rows: readonly PauseRow[];
  names: Record<QueueTable, readonly string[]>;
}

const NOTHING: readonly string[] = Object.freeze([]);

/**
 * The pauses of one QueueBox as its claims see them. A claim asks for the names paused in its
 * component no older than its poll interval: the read is reused until then (one query per poll
 * interval and process, shared by every loop, whatever the claim rate), and concurrent askers
 * share one query in flight. So a pause or a resume written by any replica, the dashboard or the
 * CLI takes effect everywhere within one poll interval (plus the claim already under way). A read
 * that fails fails the claim that asked (the claim itself would meet the same database).
 */
@Injectable()
export class ClaimPauses {
  private last?: PauseRead;
  private reading?: Promise<PauseRead>;
  /** The pauses this process has seen (`component\u0000name`), kept across `invalidate`, so each change is logged once. */
  private seen?: Set<string>;
  private readonly logger = new Logger('QueueBox:Pauses');

  /** How old a read may be for a caller that names no poll interval (a `PullClient`): the shortest of the workers'. */
  readonly defaultMaxAgeMs: number;

  constructor(
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Pick<Dialect, 'pauseList'>,
    @Optional() @Inject(QUEUEBOX_RESOLVED_OPTIONS) options?: ResolvedQueueBoxOptions,
  ) {
    this.defaultMaxAgeMs = options
      ? Math.min(options.outbox.pollIntervalMs, options.inbox.relay.pollIntervalMs, options.pull.pollIntervalMs)
      : DEFAULT_POLL_INTERVAL_MS;
  }

  /**
   * The names paused in `component` (outbox destinations, inbox sources) when the last read is
   * younger than `maxAgeMs`, else undefined (call `names`). Spares a claim a promise when nothing
   * needs reading.
   */
  namesNow(component: QueueTable, maxAgeMs: number): readonly string[] | undefined {
    const last = this.last;
    return last && performance.now() - last.at <= maxAgeMs ? last.names[component] : undefined;
  }

  /** The names paused in `component` (outbox destinations, inbox sources), read at most `maxAgeMs` ago. */
  async names(component: QueueTable, maxAgeMs = this.defaultMaxAgeMs): Promise<readonly string[]> {
    return (await this.read(maxAgeMs)).names[component];
  }

  /** Every pause, read at most `maxAgeMs` ago. */
  async rows(maxAgeMs = this.defaultMaxAgeMs): Promise<readonly PauseRow[]> {
    return (await this.read(maxAgeMs)).rows;
  }

  /** Forgets the last read (and one in flight): this process paused or resumed something, and its own claims see it at once. */
  invalidate(): void {
    this.last = undefined;
    this.reading = undefined;
  }

  /**
   * Logs each pause this process sees for the first time (with who paused it and why: the audit
   * line of a pause made elsewhere, by the CLI or another replica) and each resume, once.
   */
  private logChanges(rows: readonly PauseRow[]): void {
    const now = new Set(rows.map((row) => `${row.component}\u0000${row.name}`));
    const before = this.seen ?? new Set<string>();
    for (const row of rows) {
      if (!before.has(`${row.component}\u0000${row.name}`))
        this.logger.log(messages.pauseSeen(row.component, row.name, row.pausedBy, row.reason));
    }
    for (const id of before) {
      if (now.has(id)) continue;
      const [component, name] = id.split('\u0000');
      this.logger.log(messages.resumeSeen(component, name));
    }
    this.seen = now;
  }

  private read(maxAgeMs: number): Promise<PauseRead> {
    const last = this.last;
    if (last && performance.now() - last.at <= maxAgeMs) return Promise.resolve(last);
    if (this.reading) return this.reading;
    const startedAt = performance.now();
    const reading = this.dialect.pauseList().then(
      (rows) => {
        const names = { outbox: NOTHING, inbox: NOTHING } as Record<QueueTable, readonly string[]>;
        for (const component of ['outbox', 'inbox'] as const) {
          const of = rows.filter((row) => row.component === component).map((row) => row.name);
          if (of.length > 0) names[component] = of;
        }
        const read: PauseRead = { at: startedAt, rows, names };
        if (this.reading === reading) {
          // A read overtaken by an invalidation (a pause or resume of this process) is not logged: the next one is.
          this.logChanges(rows);
          this.last = read;
          this.reading = undefined;
        }
        return read;
      },
      (error: unknown) => {
        if (this.reading === reading) this.reading = undefined;
        throw error;
      },
    );
    this.reading = reading;
    return reading;
  }
}
