import { describeError } from '../common/errors';
import { dialectDriver } from '../dialects/drivers';
import { CliFailure } from './cli.errors';
import { cliMessages } from './cli.messages';
import type { DatabaseTarget } from './database-url';

interface DriverError {
  code?: unknown;
  number?: unknown;
  message?: unknown;
  errors?: unknown;
  originalError?: unknown;
  cause?: unknown;
}

/** Error codes and messages of `error` and of the errors it wraps (AggregateError, mssql's originalError, cause). */
function collect(error: unknown, depth = 0): { codes: Set<string>; text: string } {
  const codes = new Set<string>();
  let text = '';
  if (depth > 4 || error === null || typeof error !== 'object') return { codes, text };
  const e = error as DriverError;
  if (typeof e.code === 'string') codes.add(e.code);
  if (typeof e.message === 'string') text += ` ${e.message}`;
  const nested = [...(Array.isArray(e.errors) ? e.errors : []), e.originalError, e.cause];
  for (const inner of nested) {
    const found = collect(inner, depth + 1);
    for (const code of found.codes) codes.add(code);
    text += found.text;
  }
  return { codes, text };
}

/**
 * Turns a failure to connect (or to log in) into one line that says what to check: network codes
 * from Node.js, and what the database's driver says about a missing database or a refused login
 * (its driver entry's `connectionFailures`). The line never contains the password.
 */
export function connectionFailure(error: unknown, target: DatabaseTarget): CliFailure {
  const { codes, text } = collect(error);
  const { databaseMissing, authenticationFailed } = dialectDriver(target.type).connectionFailures;
  const hasCode = (list: readonly string[]) => list.some((code) => codes.has(code));
  const detail = () => (error instanceof Error ? error.message : describeError(error)).split('\n')[0];
  let message: string;
  if (codes.has('ECONNREFUSED') || /ECONNREFUSED/.test(text)) message = cliMessages.connectionRefused(target.where);
  else if (codes.has('ENOTFOUND') || codes.has('EAI_AGAIN') || /ENOTFOUND|EAI_AGAIN/.test(text))
    message = cliMessages.hostNotFound(target.where);
  else if (hasCode(databaseMissing.codes) || databaseMissing.text?.test(text)) message = cliMessages.databaseMissing(target.database);
  else if (hasCode(authenticationFailed.codes)) message = cliMessages.authenticationFailed(target.user, detail());
  else if (codes.has('ETIMEDOUT') || codes.has('ETIMEOUT') || /timeout/i.test(text)) message = cliMessages.connectionTimedOut(target.where);
  else message = cliMessages.connectFailed(target.masked, detail());
  return new CliFailure(message);
}
