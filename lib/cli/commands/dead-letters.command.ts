import type { DeadLetterRow } from '../../dialects/dialect-rows';
import type { QueueTable } from '../../types/claims';
import { parseComponent, parseDeadSelection, parseLimit, parseRowId } from '../admin-options';
import { withAdmin } from '../admin-session';
import { CliUsageError } from '../cli.errors';
import { cliMessages } from '../cli.messages';
import { type CliIo, CONNECTION_OPTIONS_HELP, type Command, type CommandValues, connectionOptions } from '../command';
import { formatTable, formatTime, oneLine, wrapText } from '../table';
import { formatDeadLetterGroups } from './dead-letter-groups';

const ACTIONS = ['list', 'count', 'replay', 'discard', 'groups'] as const;
const COMPONENTS: readonly QueueTable[] = ['outbox', 'inbox'];
type Action = (typeof ACTIONS)[number];
// The last error goes on lines of its own under its row, whole up to ERROR_MAX_CHARS (QueueBox
// stores at most 2000 characters of an error's text): its head names the reason (`no publisher
// named "shipping"`, `HTTP 503 from ...`), which a cut in the middle or the end once hid.
const ERROR_WIDTH = 100;
const ERROR_MAX_CHARS = 1000;
const ERROR_LABEL = '    last error: ';

export const deadLettersCommand: Command = {
  name: 'dead-letters',
  summary: 'List, count, replay, discard or group dead outbox or inbox rows',
  help: `Usage: queuebox dead-letters [list|count|replay|discard|groups] [--component outbox|inbox] [filters] [options]

  list      (the default) One page of dead rows in id order: id, message id (outbox) or idempotency key
            (inbox), destination or source, key or aggregate, attempts, when it died (its last
            attempt), and under each row its last error, wrapped, whole up to ${ERROR_MAX_CHARS}
            characters (--json has it whole always)
  count     How many dead rows match
  replay    Put the matching dead rows back to pending (attempts 0, due now, last error kept,
            headers X-QueueBox-Replay-Count and X-QueueBox-Replayed-At added); prints how many
  discard   Delete the matching dead rows; prints how many
  groups    Dead rows by cause: one line per destination (source) and fingerprint (error class and
            message with ids and numbers taken out), the biggest first, with how many and when the
            first and last died. Replay or discard a group with --name and --fingerprint; only rows
            whose fingerprint still matches when the statement locks them change

Only dead rows are read or changed, whatever the filter. replay and discard refuse to run with
no --id and no filter unless --all is given. With no sub-command it lists; list without
--component (and without --id or --after-id) shows one page of each component, outbox first.

Filters (they combine with AND):
  --component <outbox|inbox>  Required, but for list (default: both)
  --name <name>               Destination (outbox) or source (inbox), exactly
  --error <text>              Last error contains this text (case-insensitive on PostgreSQL)
  --after <time>              Died at or after this ISO 8601 time (e.g. 2026-11-30T14:00:00Z)
  --before <time>             Died before this ISO 8601 time
  --fingerprint <text>        Of this group, exactly (as \`groups\` prints it)
  --id <id>                   These rows only: repeat it or give a comma list (--id 7,8);
                              not combined with the other filters

Options:
  --all                       replay, discard: every dead row of the component
  --limit <n>                 list, groups: rows per page, 1 to 1000 (default 50)
  --after-id <id>             list: the page after this id (as printed by the previous page)
  --json                      Print JSON: list {rows, nextAfterId} (both components:
                              {outbox: {rows, nextAfterId}, inbox: {...}}), count {count},
                              replay {replayed}, discard {discarded}, groups {groups}
${CONNECTION_OPTIONS_HELP}
  -h, --help                  Show this help

Examples:
  queuebox dead-letters
  queuebox dead-letters list --component outbox --name billing --error timeout
  queuebox dead-letters replay --component outbox --name billing --after 2026-11-30T09:00:00Z
  queuebox dead-letters discard --component inbox --id 412,413
  queuebox dead-letters groups --component outbox
  queuebox dead-letters replay --component outbox --name billing --fingerprint 'PublishError/503: HTTP # from billing'`,
  options: {
    ...connectionOptions,
    component: { type: 'string' },
    name: { type: 'string' },
    error: { type: 'string' },
    after: { type: 'string' },
    before: { type: 'string' },
    fingerprint: { type: 'string' },
    id: { type: 'string', multiple: true },
    all: { type: 'boolean' },
    limit: { type: 'string' },
    'after-id': { type: 'string' },
    json: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  },
  positionals: true,
  async run(values, io, positionals) {
    // No sub-command: list, the read an operator wants first (issue 40).
    const [action = 'list', ...extra] = positionals;
    if (!(ACTIONS as readonly string[]).includes(action))
      throw new CliUsageError(cliMessages.subcommandUnknown('dead-letters', action, ACTIONS));
    if (extra.length > 0) throw new CliUsageError(cliMessages.extraArguments(extra));
    if (action === 'groups') return groups(values, io);
    if (action === 'list' && values.component === undefined && values.id === undefined && values['after-id'] === undefined)
      return listBoth(values, io);
    const { selection, filtered } = parseDeadSelection(values);
    const { component } = selection;
    const json = values.json === true;
    const write = action === 'replay' || action === 'discard';
    if (!write && values.all !== undefined) throw new CliUsageError(cliMessages.optionNotHere('--all', 'replay and discard'));
    if (action !== 'list') {
      for (const option of ['limit', 'after-id'])
        if (values[option] !== undefined) throw new CliUsageError(cliMessages.optionNotHere(`--${option}`, 'list'));
    }
    if (write && !filtered && values.all !== true) throw new CliUsageError(cliMessages.bulkWithoutAll(action, component));
    const limit = parseLimit(values);
    const afterId = values['after-id'] === undefined ? undefined : parseRowId('--after-id', values['after-id'] as string);

    return withAdmin(values, io, async ({ admin, target }) => {
      if (!json) io.out(`Database: ${target.masked} (${target.type})`);
      switch (action as Exclude<Action, 'groups'>) {
        case 'list': {
          const page = await admin.listDeadLetters(selection, { limit, afterId });
          if (json) io.out(JSON.stringify(page, null, 2));
          else for (const line of formatDeadLetters(component, page.rows, page.nextAfterId, values)) io.out(line);
          return 0;
        }
        case 'count': {
          const count = await admin.countDeadLetters(selection);
          io.out(json ? JSON.stringify({ component, count }) : `${count} dead ${component} row(s) match.`);
          return 0;
        }
        case 'replay': {
          const replayed = await admin.replayDeadLetters({ ...selection, all: values.all === true });
          io.out(json ? JSON.stringify({ component, replayed }) : `Replayed ${replayed} dead ${component} row(s): they are pending again.`);
          return 0;
        }
        case 'discard': {
          const discarded = await admin.discardDeadLetters({ ...selection, all: values.all === true });
          io.out(json ? JSON.stringify({ component, discarded }) : `Discarded ${discarded} dead ${component} row(s).`);
          return 0;
        }
      }
    });
  },
};

/** `dead-letters list` without --component: one page of each component, outbox first. */
async function listBoth(values: CommandValues, io: CliIo): Promise<number> {
  const selections = COMPONENTS.map((component) => parseDeadSelection({ ...values, component }).selection);
  const limit = parseLimit(values);
  return withAdmin(values, io, async ({ admin, target }) => {
    const pages: { rows: DeadLetterRow[]; nextAfterId: string | null }[] = [];
    for (const selection of selections) pages.push(await admin.listDeadLetters(selection, { limit }));
    if (values.json === true) {
      io.out(JSON.stringify({ outbox: pages[0], inbox: pages[1] }, null, 2));
      return 0;
    }
    io.out(`Database: ${target.masked} (${target.type})`);
    COMPONENTS.forEach((component, i) => {
      const lines = formatDeadLetters(component, pages[i].rows, pages[i].nextAfterId, values);
      // The next page is one component's: name it in the hint.
      for (const line of lines) io.out(line.replace('add --after-id', `add --component ${component} --after-id`));
    });
    return 0;
  });
}

/** `dead-letters groups`: takes --component, --limit and --json only. */
function groups(values: CommandValues, io: CliIo): Promise<number> {
  const component = parseComponent(values);
  for (const option of ['name', 'error', 'after', 'before', 'fingerprint', 'id', 'all', 'after-id']) {
    if (values[option] !== undefined) throw new CliUsageError(cliMessages.optionNotHere(`--${option}`, 'list, count, replay and discard'));
  }
  const limit = parseLimit(values);
  return withAdmin(values, io, async ({ admin, target }) => {
    const rows = await admin.deadLetterGroups({ component, limit });
    if (values.json === true) io.out(JSON.stringify({ component, groups: rows }, null, 2));
    else for (const line of [`Database: ${target.masked} (${target.type})`, ...formatDeadLetterGroups(component, rows)]) io.out(line);
    return 0;
  });
}

/** A page of dead rows as a table, then how to get the next page. */
export function formatDeadLetters(
  component: QueueTable,
  rows: DeadLetterRow[],
  nextAfterId: string | null,
  values: Record<string, unknown>,
): string[] {
  if (rows.length === 0)
    return [`No dead ${component} rows match${values['after-id'] === undefined ? '' : ` after id ${values['after-id']}`}.`];
  const header = [
    'id',
    component === 'outbox' ? 'message id' : 'idempotency key',
    component === 'outbox' ? 'destination' : 'source',
    component === 'outbox' ? 'key' : 'aggregate',
    'attempts',
    'died at',
  ];
  const table = rows.map((r) => [
    r.id,
    oneLine(component === 'outbox' ? r.messageId : r.idempotencyKey, 40),
    r.name,
    oneLine(r.key, 30),
    String(r.attempts),
    formatTime(r.lastAttemptAt ?? r.createdAt),
  ]);
  const [head, ...formatted] = formatTable(header, table, [0, 4]);
  const body = formatted.flatMap((line, i) => [line, ...errorLines(rows[i].lastError)]);
  const lines = [`Dead ${component} rows:`, head, ...body];
  lines.push(
    nextAfterId === null
      ? `${rows.length} row(s); no more pages.`
      : `${rows.length} row(s); more may follow: add --after-id ${nextAfterId} for the next page.`,
  );
  return lines;
}

/** `    last error: <text>`, wrapped, continuation lines aligned under the text. */
function errorLines(lastError: string | null): string[] {
  const [first, ...rest] = wrapText(lastError ?? '-', ERROR_WIDTH, ERROR_MAX_CHARS);
  return [`${ERROR_LABEL}${first}`, ...rest.map((line) => `${' '.repeat(ERROR_LABEL.length)}${line}`)];
}
