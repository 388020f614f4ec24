import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Logger } from '@nestjs/common';

/** The PostgreSQL the app runs on, and how to let go of it. */
export interface Database {
  url: string;
  /** Stops the embedded server, if the app started one; safe to call more than once. */
  stop(): Promise<void>;
}

interface EmbeddedPostgresScript {
  startEmbeddedPostgres(options: { log?: (line: string) => void }): Promise<Database>;
}

// A dev tool of this repository (not part of the queuebox package), resolved from sample-app/dist/.
const EMBEDDED_POSTGRES_SCRIPT = join(__dirname, '../../scripts/embedded-postgres.mjs');

const logger = new Logger('Database');

/** DATABASE_URL when set; otherwise a throwaway embedded PostgreSQL in a temporary folder. */
export async function openDatabase(): Promise<Database> {
  const url = process.env.DATABASE_URL;
  if (url) {
    logger.log(`Using DATABASE_URL ${url.replace(/:[^:@/]*@/, ':***@')}`);
    return { url, stop: async () => undefined };
  }
  logger.log('DATABASE_URL is not set: starting an embedded PostgreSQL in a temporary folder...');
  const { startEmbeddedPostgres } = (await import(pathToFileURL(EMBEDDED_POSTGRES_SCRIPT).href)) as EmbeddedPostgresScript;
  const serverLog: string[] = [];
  try {
    const database = await startEmbeddedPostgres({ log: (line) => serverLog.push(line) });
    logger.log(`Embedded PostgreSQL is up at ${database.url}; it is stopped and deleted on exit`);
    return database;
  } catch (error) {
    // The server's own log says why; it is worth printing only if nobody interrupted the start on purpose.
    throw new Error(`Embedded PostgreSQL did not start (${error ?? 'its process exited'}). Its log:\n${serverLog.join('')}`, {
      cause: error,
    });
  }
}
