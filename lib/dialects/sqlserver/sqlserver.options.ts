import type { DataSourceOptions } from 'typeorm';
import { QueueBoxConfigError } from '../../errors/queuebox.errors';
import { messages } from '../../texts/queuebox.messages';
import { CLAIM_LOCK_WAIT_MS } from './claims.sql';

/** mssql's request timeout when none is set. */
const MSSQL_DEFAULT_REQUEST_TIMEOUT_MS = 15_000;

/**
 * A claim may wait the whole lock wait for sp_getapplock and then run its statement; this is what
 * the statement keeps. mssql's default (15 s) leaves exactly this.
 */
export const CLAIM_STATEMENT_MARGIN_MS = 5_000;

export const MIN_REQUEST_TIMEOUT_MS = CLAIM_LOCK_WAIT_MS + CLAIM_STATEMENT_MARGIN_MS;

interface TimeoutOptions {
  requestTimeout?: unknown;
  timeout?: unknown;
  options?: { requestTimeout?: unknown };
}

/**
 * The request timeout the mssql driver will use, and the option it came from, resolved the way
 * TypeORM and mssql do: TypeORM lays `extra` over its own options, then mssql prefers
 * `options.requestTimeout`, then `requestTimeout`, then `timeout`; 0 (also from a negative value
 * or Infinity) means none.
 */
export function sqlServerRequestTimeout(dataSourceOptions: DataSourceOptions): { ms: number; option: string } {
  const typeorm = dataSourceOptions as TimeoutOptions & { extra?: TimeoutOptions };
  const extra = typeorm.extra ?? {};
  // `extra` is laid over TypeORM's options key by key: `extra.options` replaces `options` whole.
  const fromExtra = (key: keyof TimeoutOptions) => Object.hasOwn(extra, key);
  const driverOptions = fromExtra('options') ? extra.options : typeorm.options;
  const candidates: [unknown, string][] = [
    [driverOptions?.requestTimeout, fromExtra('options') ? 'extra.options.requestTimeout' : 'options.requestTimeout'],
    fromExtra('requestTimeout') ? [extra.requestTimeout, 'extra.requestTimeout'] : [typeorm.requestTimeout, 'requestTimeout'],
    [extra.timeout, 'extra.timeout'],
  ];
  const found = candidates.find(([value]) => value !== undefined && value !== null);
  if (!found) return { ms: MSSQL_DEFAULT_REQUEST_TIMEOUT_MS, option: 'requestTimeout' };
  const [value, option] = found;
  const ms = Number(value);
  if (Number.isNaN(ms)) return { ms: MSSQL_DEFAULT_REQUEST_TIMEOUT_MS, option };
  return { ms: ms === Number.POSITIVE_INFINITY || ms < 0 ? 0 : ms, option };
}

/**
 * Refuses, at start-up, a request timeout that would cut a claim off while it waits for its
 * application lock: such claims fail spuriously, and a batch cut off while it holds a
 * session-owned lock leaves the lock on its pooled connection.
 */
export function checkSqlServerRequestTimeout(dataSourceOptions: DataSourceOptions): void {
  const { ms, option } = sqlServerRequestTimeout(dataSourceOptions);
  if (ms !== 0 && ms < MIN_REQUEST_TIMEOUT_MS) {
    throw new QueueBoxConfigError(option, messages.sqlServerRequestTimeoutTooShort(option, ms, MIN_REQUEST_TIMEOUT_MS, CLAIM_LOCK_WAIT_MS));
  }
}
