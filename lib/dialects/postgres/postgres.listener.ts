import { randomBytes } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { settledWithin } from '../../common/wait';
import type { WorkListener, WorkNotice } from '../dialect';

/** Channel names are derived identifiers (hex digests), quoted as they are. */
const listenSql = (channel: string) => `LISTEN "${channel}"`;

interface PgClient {
  query(query: { text: string; query_timeout?: number }): Promise<unknown>;
  on(event: 'notification', listener: (message: { channel: string; payload?: string }) => void): void;
  on(event: 'error' | 'end', listener: (error?: Error) => void): void;
  removeListener(event: string, listener: (...args: never[]) => void): void;
}

type Release = (error?: Error) => void;

const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 30_000;

/**
 * Keeps one pooled connection LISTENing on the outbox and inbox channels, and reconnects with
 * backoff when it breaks. Until it is back, workers fall back to polling; `onState` tells which.
 */
export class PostgresWorkListener implements WorkListener {
  private client?: PgClient;
  private release?: Release;
  private detach?: () => void;
  private retryMs = RETRY_MIN_MS;
  private retryTimer?: NodeJS.Timeout;
  private closed = false;

  constructor(
    private readonly dataSource: DataSource,
    private readonly channels: { outbox: string; inbox: string },
    private readonly onWork: (notice: WorkNotice) => void,
    private readonly onState: (listening: boolean, error?: unknown) => void,
    /** Bound on LISTEN and UNLISTEN: a connection that does not answer is dropped and made again. */
    private readonly queryTimeoutMs?: number,
  ) {}

  async start(): Promise<void> {
    try {
      await this.connect();
    } catch (error) {
      this.scheduleReconnect(error);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retryTimer);
    const { client, release } = this;
    this.client = undefined;
    this.release = undefined;
    if (!client || !release) return;
    this.detach?.();
    // The connection can still drop during UNLISTEN: until it is released, an 'error' event needs
    // a listener (pg-pool's comes back only with the release), or it would end the process.
    const ignore = () => undefined;
    client.on('error', ignore);
    try {
      await client.query({ text: 'UNLISTEN *', query_timeout: this.queryTimeoutMs });
      client.removeListener('error', ignore);
      release();
    } catch (error) {
      release(error as Error);
    }
  }

  private async connect(): Promise<void> {
    const driver = this.dataSource.driver as unknown as { obtainMasterConnection(): Promise<[PgClient, Release]> };
    const [client, release] = await driver.obtainMasterConnection();
    if (this.closed) return release();
    this.client = client;
    this.release = release;
    const notified = (message: { channel: string; payload?: string }) => {
      if (message.channel === this.channels.outbox) this.onWork({ table: 'outbox' });
      else if (message.channel === this.channels.inbox && message.payload) this.onWork({ table: 'inbox', source: message.payload });
    };
    let gone = false;
    const broken = (error?: unknown) => {
      if (gone) return; // 'error' and 'end' may both fire
      gone = true;
      this.lose(client, release, error ?? new Error('the notification connection ended'));
    };
    client.on('notification', notified);
    client.on('error', broken);
    client.on('end', broken);
    this.detach = () => {
      client.removeListener('notification', notified);
      client.removeListener('error', broken);
      client.removeListener('end', broken);
    };
    try {
      await client.query({ text: listenSql(this.channels.outbox), query_timeout: this.queryTimeoutMs });
      await client.query({ text: listenSql(this.channels.inbox), query_timeout: this.queryTimeoutMs });
    } catch (error) {
      broken(error);
      return;
    }
    this.retryMs = RETRY_MIN_MS;
    this.onState(true);
    // Work may have arrived while nobody listened: let the workers look once.
    this.onWork({ table: 'outbox' });
    this.onWork({ table: 'inbox' });
  }

  private lose(client: PgClient, release: Release, error: unknown): void {
    if (this.client === client) {
      this.detach?.();
      this.client = undefined;
      this.release = undefined;
    }
    // A late error on the dead connection must not crash the process as an unhandled 'error' event.
    client.on('error', () => undefined);
    // Destroys the connection instead of returning a broken one to the pool.
    release(error instanceof Error ? error : new Error(String(error)));
    if (!this.closed) this.scheduleReconnect(error);
  }

  private scheduleReconnect(error: unknown): void {
    this.onState(false, error);
    const delay = this.retryMs;
    this.retryMs = Math.min(RETRY_MAX_MS, this.retryMs * 2);
    this.retryTimer = setTimeout(() => {
      this.connect().catch((failure) => this.scheduleReconnect(failure));
    }, delay);
    this.retryTimer.unref();
  }
}

/** What `notificationArrives` needs of a node-postgres client. */
export interface ProbeClient {
  query(query: { text: string; values?: unknown[] }): Promise<unknown>;
  on(event: 'notification', listener: (message: { channel: string }) => void): unknown;
  removeListener(event: 'notification', listener: (message: { channel: string }) => void): unknown;
}

/**
 * Whether a notification sent from `notifier` reaches `listener` within `timeoutMs`: LISTEN on a
 * channel of its own (no worker listens there), NOTIFY from the other connection, wait. Through a
 * pooler in transaction mode the LISTEN session is handed back after the statement, so nothing
 * arrives.
 */
export async function notificationArrives(listener: ProbeClient, notifier: ProbeClient, timeoutMs: number): Promise<boolean> {
  const channel = `queuebox_probe_${randomBytes(8).toString('hex')}`;
  let heard: () => void = () => undefined;
  const arrived = new Promise<void>((resolve) => {
    heard = resolve;
  });
  const onNotification = (message: { channel: string }) => {
    if (message.channel === channel) heard();
  };
  listener.on('notification', onNotification);
  try {
    await listener.query({ text: listenSql(channel) });
    await notifier.query({ text: 'SELECT pg_notify($1, $2)', values: [channel, 'probe'] });
    return await settledWithin([arrived], timeoutMs);
  } finally {
    listener.removeListener('notification', onNotification);
    await listener.query({ text: `UNLISTEN "${channel}"` }).catch(() => undefined);
  }
}
