import type { AttemptRow } from '../../dialects/dialect-rows';
import type { QueueTable } from '../../types/claims';
import { parseComponent, parseRowId } from '../admin-options';
import { withAdmin } from '../admin-session';
import { CliUsageError } from '../cli.errors';
import { cliMessages } from '../cli.messages';
import { CONNECTION_OPTIONS_HELP, type Command, connectionOptions } from '../command';
import { formatTable, formatTime, wrapText } from '../table';

const ERROR_WIDTH = 100;
const ERROR_MAX_CHARS = 1000;
const ERROR_LABEL = '    error: ';

export const attemptsCommand: Command = {
  name: 'attempts',
  summary: 'Show the failed attempts of one outbox or inbox row',
  help: `Usage: queuebox attempts <id> --component outbox|inbox [options]

The failed attempts of one row (any state), newest first: the attempt number, when it failed,
how long it ran from its claim, the instance that claimed it, what the failure led to (retry or
dead), its error class and, under it, its error. QueueBox keeps the last \`attemptHistory\`
(default 10) per row, written only when an attempt fails; a row that never failed has none.
<id> is the row id (as \`queuebox dead-letters list\` and \`queuebox blocked\` print it).

Options:
  --component <outbox|inbox>  Required
  --json                      Print {component, id, attempts}
${CONNECTION_OPTIONS_HELP}
  -h, --help                  Show this help

Example:
  queuebox attempts 4211 --component outbox`,
  options: {
    ...connectionOptions,
    component: { type: 'string' },
    json: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  },
  positionals: true,
  async run(values, io, positionals) {
    const [given, ...extra] = positionals;
    if (given === undefined) throw new CliUsageError(cliMessages.rowIdMissing('attempts'));
    if (extra.length > 0) throw new CliUsageError(cliMessages.extraArguments(extra));
    const id = parseRowId('<id>', given);
    const component = parseComponent(values);
    return withAdmin(values, io, async ({ admin, target }) => {
      const attempts = await admin.listAttempts({ component, id });
      if (values.json === true) {
        io.out(JSON.stringify({ component, id, attempts }, null, 2));
        return 0;
      }
      io.out(`Database: ${target.masked} (${target.type})`);
      for (const line of formatAttempts(component, id, attempts)) io.out(line);
      return 0;
    });
  },
};

/** A row's failed attempts as a table, each error on lines of its own under its attempt. */
export function formatAttempts(component: QueueTable, id: string, rows: AttemptRow[]): string[] {
  if (rows.length === 0) return [`No failed attempts recorded for ${component} row ${id}.`];
  const header = ['attempt', 'failed at', 'ran for', 'instance', 'outcome', 'error class'];
  const table = rows.map((r) => [
    String(r.attempt),
    formatTime(r.failedAt),
    r.durationMs === null ? '-' : `${(r.durationMs / 1000).toFixed(3)}s`,
    r.instanceId === null ? '-' : r.instanceId.slice(0, 8),
    r.outcome,
    r.errorClass,
  ]);
  const [head, ...formatted] = formatTable(header, table, [0, 2]);
  const body = formatted.flatMap((line, i) => {
    const [first, ...rest] = wrapText(rows[i].error, ERROR_WIDTH, ERROR_MAX_CHARS);
    return [line, `${ERROR_LABEL}${first}`, ...rest.map((l) => `${' '.repeat(ERROR_LABEL.length)}${l}`)];
  });
  return [`Failed attempts of ${component} row ${id}, newest first:`, head, ...body, `${rows.length} attempt(s).`];
}
