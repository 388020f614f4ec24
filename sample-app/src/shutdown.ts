import { constants } from 'node:os';
import { type INestApplication, Logger } from '@nestjs/common';
import type { Database } from './database';

// Last resort if closing hangs; QueueBox alone may wait 10 s (outbox.shutdownTimeoutMs) for in-flight publishes.
const FORCED_EXIT_MS = 20_000;

/**
 * Ends the sample in one order, whatever the reason (done, failed, SIGINT/SIGTERM): close the app,
 * which lets QueueBox drain and TypeORM disconnect, then stop the database the app needed until then.
 */
export class Shutdown {
  private readonly logger = new Logger('Shutdown');
  // Promises rather than values, so that a shutdown during startup still finds what to close.
  private database?: Promise<Database>;
  private app?: Promise<INestApplication>;
  private begun = false;
  private rejectBegun: (reason: Error) => void = () => undefined;
  private readonly whenBegun = new Promise<never>((_, reject) => {
    this.rejectBegun = reject;
  });

  constructor(signals: readonly NodeJS.Signals[]) {
    this.whenBegun.catch(() => undefined);
    for (const signal of signals) {
      // Nest's own handler (enableShutdownHooks) closes the app as well, then re-sends the signal to
      // end the process. Listening here keeps the process alive through that until the database stopped.
      process.on(signal, () => void this.begin(128 + constants.signals[signal], `received ${signal}`));
    }
  }

  get hasBegun(): boolean {
    return this.begun;
  }

  closeDatabase(database: Promise<Database>): Promise<Database> {
    this.database = database;
    return database;
  }

  closeApp(app: Promise<INestApplication>): Promise<INestApplication> {
    this.app = app;
    return app;
  }

  /** `step`, unless shutdown begins first: then it rejects, so the caller stops where it is. */
  unlessBegun<T>(step: Promise<T>): Promise<T> {
    return Promise.race([step, this.whenBegun]);
  }

  async begin(exitCode: number, reason: string): Promise<void> {
    if (this.begun) return;
    this.begun = true;
    this.rejectBegun(new Error(`shutting down: ${reason}`));
    process.exitCode = exitCode;
    setTimeout(() => {
      this.logger.error(`Still running ${FORCED_EXIT_MS / 1000} s after shutdown began; stopping the database and exiting anyway.`);
      void this.stopDatabase().finally(() => process.exit(exitCode || 1));
    }, FORCED_EXIT_MS).unref();

    this.logger.log(`Shutting down (${reason})...`);
    try {
      await (await this.app?.catch(() => undefined))?.close();
      this.logger.log('App closed.');
    } catch (error) {
      process.exitCode = exitCode || 1;
      this.logger.error(`Closing the app failed: ${(error as Error).stack ?? error}`);
    }
    await this.stopDatabase();
    this.logger.log(`Database released. Exit code ${process.exitCode}.`);
  }

  private async stopDatabase(): Promise<void> {
    await (await this.database?.catch(() => undefined))?.stop();
  }
}
