import { type BeforeApplicationShutdown, Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { describeError } from '../common/errors';
import { logContext } from '../common/log-context';
import { QUEUEBOX_DIALECT, QUEUEBOX_IDENTITY, QUEUEBOX_RESOLVED_OPTIONS } from '../common/queuebox.constants';
import type { Dialect, WorkListener } from '../dialects/dialect';
import { InboxSources } from '../inbox-runtime/inbox.sources';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { OutboxPoller } from '../outbox/outbox.poller';
import { messages } from '../texts/queuebox.messages';
import type { QueueBoxIdentity } from '../types/instance';
import { DatabaseRecovery } from '../workers/database-recovery';

/**
 * Wakes the workers of this process when another process commits work (PostgreSQL
 * LISTEN/NOTIFY), so a message leaves within milliseconds of its commit instead of at the next
 * poll. Polling stays as the fallback: while the notification connection is down (it reconnects
 * by itself), workers still find their work every `pollIntervalMs`.
 */
@Injectable()
export class WorkNotifications implements BeforeApplicationShutdown {
  private readonly logger: Logger;
  private listener?: WorkListener;
  private up = false;

  constructor(
    @Inject(QUEUEBOX_DIALECT) private readonly dialect: Dialect,
    @Inject(QUEUEBOX_RESOLVED_OPTIONS) private readonly options: ResolvedQueueBoxOptions,
    private readonly poller: OutboxPoller,
    private readonly sources: InboxSources,
    private readonly recovery: DatabaseRecovery,
    @Optional() @Inject(QUEUEBOX_IDENTITY) instance?: QueueBoxIdentity,
  ) {
    this.logger = new Logger(logContext('QueueBox:WorkNotifications', instance?.name));
  }

  /** Whether this process listens for notifications at all (workers run and the database has them). */
  get enabled(): boolean {
    return this.listener !== undefined;
  }

  /** Whether notifications are being received now (false while reconnecting, or where the database has none). */
  get listening(): boolean {
    return this.up;
  }

  /** Listens when the database has notifications and a worker runs here; started with the workers by `QueueBoxInstance`. */
  async start(): Promise<void> {
    const { outbox, relay, pull } = this.options.workers;
    if (this.listener || !this.dialect.workListen || !(outbox || relay || pull)) return;
    this.listener = await this.dialect.workListen({
      onWork: (notice) => {
        if (notice.table === 'outbox') this.poller.wake();
        else if (notice.source) this.sources.notifyReceived(notice.source);
        else for (const source of this.sources.consumedSources()) this.sources.notifyReceived(source);
      },
      onState: (listening, error) => {
        if (listening && !this.up) this.logger.log(messages.notificationsUp());
        // The notification connection is back: so is the database, for loops waiting after a failed claim.
        if (listening) this.recovery.recovered();
        if (!listening && (this.up || this.listener === undefined)) this.logger.warn(messages.notificationsDown(describeError(error)));
        this.up = listening;
      },
    });
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.listener?.close();
    this.listener = undefined;
    this.up = false;
  }
}
