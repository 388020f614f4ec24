import type { DeadLetterFilter, DeadLetterIds } from '../admin/admin.types';
import { isRowId } from '../admin/queuebox.admin';
import type { QueueTable } from '../types/claims';
import { CliUsageError } from './cli.errors';
import { cliMessages } from './cli.messages';
import type { CommandValues } from './command';

// The same bounds QueueBoxAdmin checks; checked here first so the message names the CLI option.
const MAX_LIMIT = 1000;
const MAX_TEXT = 2000;

/** `--component outbox|inbox`, required. */
export function parseComponent(values: CommandValues): QueueTable {
  const value = values.component as string | undefined;
  if (value === undefined) throw new CliUsageError(cliMessages.componentMissing());
  if (value !== 'outbox' && value !== 'inbox') throw new CliUsageError(cliMessages.componentInvalid(value));
  return value;
}

/** `--limit`: an integer from 1 to 1000, or undefined (the admin's default, 50). */
export function parseLimit(values: CommandValues): number | undefined {
  const value = values.limit as string | undefined;
  if (value === undefined) return undefined;
  if (!/^[0-9]+$/.test(value) || Number(value) < 1 || Number(value) > MAX_LIMIT) {
    throw new CliUsageError(cliMessages.limitInvalid(value, MAX_LIMIT));
  }
  return Number(value);
}

export function parseRowId(option: string, value: string): string {
  if (!isRowId(value)) throw new CliUsageError(cliMessages.rowIdInvalid(option, value));
  return value;
}

export function parseText(option: string, value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (value.length === 0 || value.length > MAX_TEXT || value.includes('\u0000')) throw new CliUsageError(cliMessages.textInvalid(option));
  return value;
}

export function parseTime(option: string, value: string | undefined): Date | undefined {
  if (value === undefined) return undefined;
  // Date.parse takes more than ISO 8601 (e.g. "1"); ask for at least a date.
  const time = /^\d{4}-\d{2}-\d{2}/.test(value) ? new Date(value) : new Date(Number.NaN);
  if (Number.isNaN(time.getTime())) throw new CliUsageError(cliMessages.timeInvalid(option, value));
  return time;
}

/** `--id 7 --id 8,9`: every id, in order given, without repeats. */
function parseIds(values: CommandValues): string[] | undefined {
  const given = values.id as string[] | undefined;
  if (given === undefined) return undefined;
  const ids = given.flatMap((value) => value.split(',')).map((id) => parseRowId('--id', id.trim()));
  return [...new Set(ids)];
}

/** The dead rows the options pick: by `--id`, or by the filter options (possibly none). */
export function parseDeadSelection(values: CommandValues): { selection: DeadLetterFilter | DeadLetterIds; filtered: boolean } {
  const component = parseComponent(values);
  const ids = parseIds(values);
  const filter: DeadLetterFilter = {
    component,
    name: parseText('--name', values.name as string | undefined),
    errorContains: parseText('--error', values.error as string | undefined),
    deadAfter: parseTime('--after', values.after as string | undefined),
    deadBefore: parseTime('--before', values.before as string | undefined),
    fingerprint: parseText('--fingerprint', values.fingerprint as string | undefined),
  };
  const filtered =
    filter.name !== undefined ||
    filter.errorContains !== undefined ||
    filter.deadAfter !== undefined ||
    filter.deadBefore !== undefined ||
    filter.fingerprint !== undefined;
  if (ids !== undefined) {
    if (filtered) throw new CliUsageError(cliMessages.idsWithFilter());
    return { selection: { component, ids }, filtered: true };
  }
  return { selection: filter, filtered };
}
