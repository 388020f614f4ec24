import { type MessageFilter, type MessagePage, toMessageSearch } from '../../admin/message-search';
import type { MessageState } from '../../dialects/message-rows';
import { parseLimit, parseRowId, parseText, parseTime } from '../admin-options';
import { withAdmin } from '../admin-session';
import { CliUsageError } from '../cli.errors';
import { cliMessages } from '../cli.messages';
import { CONNECTION_OPTIONS_HELP, type Command, connectionOptions } from '../command';
import { formatTable, formatTime, oneLine } from '../table';

/** `a.b=value`: the path before the first `=`, the value after it (which may hold `=`). */
function parsePath(option: string, value: string | undefined): { path: string; equals: string } | undefined {
  if (value === undefined) return undefined;
  const at = value.indexOf('=');
  if (at < 1) throw new CliUsageError(cliMessages.pathOptionInvalid(option, value));
  return { path: value.slice(0, at), equals: value.slice(at + 1) };
}

export const messagesCommand: Command = {
  name: 'messages',
  summary: 'Find messages of any state: by id, key, destination or source, state, time, payload path or header',
  help: `Usage: queuebox messages [--component outbox|inbox] [filters] [--limit <n>] [--after <cursor>] [--json] [options]

Lists rows of the outbox or the inbox in any state (pending, processing, sent or processed, dead),
newest first, one page at a time. Every filter given must hold; values compare exactly. Times
are printed in UTC.

How it is served, and what it costs (docs/dashboard.md has the measured numbers): --id (outbox),
or --id with --source (inbox), through a unique index; --state pending|processing|dead through
the partial index of that state (the cost follows the backlog or the dead letters); anything
else by a bounded scan: the newest rows from the cursor, at most --scan rows (default 100000),
filtered as they come. When such a scan finds fewer rows than --limit, it prints "Scanned up to
row N": older rows were not looked at, and --after continues from there.

Options:
  --component <outbox|inbox>  The table (default outbox)
  --id <id>                   Outbox message id (a UUID) or inbox idempotency key
  --key <key>                 Outbox key or inbox aggregate id
  --destination <name>        Outbox destination
  --source <name>             Inbox source
  --state <state>             pending, processing, dead, sent (outbox) or processed (inbox)
  --since <time>              At or after this time (ISO 8601: 2026-11-30T14:00:00Z; without a
                              zone, this machine's local time)
  --until <time>              Before this time
  --time <created|finished>   What --since/--until bound: the enqueue or receive time (default),
                              or sent_at / processed_at
  --path <path=value>         A payload value: order.id=123 (dotted; items.0.sku for arrays;
                              segments of letters, digits, _ and -)
  --header <name=value>       A header: x-tenant=acme
  --limit <n>                 Rows per page, 1 to 1000 (default 50)
  --after <cursor>            The cursor printed by the previous page: older rows
  --scan <n>                  Rows a bounded scan examines, 1 to 1000000 (default 100000)
  --payload                   Print the payload too (with --json)
  --json                      Print { rows, next, plan, scannedUpTo } as JSON
${CONNECTION_OPTIONS_HELP}
  -h, --help                  Show this help

Examples:
  queuebox messages --id 0b6f3c1e-8a8e-4a43-9f0f-3f7f1d0a9c11
  queuebox messages --destination billing --path order.id=123
  queuebox messages --component inbox --source payments --state dead --since 2026-11-30T00:00:00Z`,
  options: {
    ...connectionOptions,
    component: { type: 'string' },
    id: { type: 'string' },
    key: { type: 'string' },
    destination: { type: 'string' },
    source: { type: 'string' },
    state: { type: 'string' },
    since: { type: 'string' },
    until: { type: 'string' },
    time: { type: 'string' },
    path: { type: 'string' },
    header: { type: 'string' },
    limit: { type: 'string' },
    after: { type: 'string' },
    scan: { type: 'string' },
    payload: { type: 'boolean' },
    json: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  },
  async run(values, io) {
    const given = (values.component as string | undefined) ?? 'outbox';
    if (given !== 'outbox' && given !== 'inbox') throw new CliUsageError(cliMessages.componentInvalid(given));
    const component = given;
    if ((component === 'outbox' && values.source !== undefined) || (component === 'inbox' && values.destination !== undefined)) {
      throw new CliUsageError(cliMessages.messagesNameClash(component));
    }
    const path = parsePath('--path', values.path as string | undefined);
    const header = parsePath('--header', values.header as string | undefined);
    if (path && header) throw new CliUsageError(cliMessages.optionNotHere('--header', 'a search without --path'));
    const scan = values.scan as string | undefined;
    if (scan !== undefined && (!/^[0-9]+$/.test(scan) || Number(scan) < 1 || Number(scan) > 1_000_000)) {
      throw new CliUsageError(cliMessages.scanInvalid(scan));
    }
    const filter: MessageFilter = {
      component,
      messageId: parseText('--id', values.id as string | undefined),
      key: parseText('--key', values.key as string | undefined),
      name: parseText(component === 'outbox' ? '--destination' : '--source', (values.destination ?? values.source) as string | undefined),
      state: values.state as MessageState | undefined,
      time: values.time as 'created' | 'finished' | undefined,
      since: parseTime('--since', values.since as string | undefined),
      until: parseTime('--until', values.until as string | undefined),
      path: path ? { in: 'payload', ...path } : header ? { in: 'headers', ...header } : undefined,
    };
    const page: MessagePage = {
      limit: parseLimit(values),
      after: values.after === undefined ? undefined : parseRowId('--after', values.after as string),
      scanLimit: scan === undefined ? undefined : Number(scan),
      includePayload: values.payload === true,
    };
    toMessageSearch(filter, page, component); // the admin's checks, before connecting: a bad argument is a usage error
    return withAdmin(values, io, async ({ admin, target }) => {
      const result = await admin.findMessages(filter, page);
      if (values.json === true) {
        io.out(JSON.stringify(result, null, 2));
        return 0;
      }
      io.out(`Database: ${target.masked} (${target.type})`);
      if (result.rows.length === 0) {
        io.out(`No ${component} messages match.`);
        if (component === 'outbox' && (filter.state === 'sent' || filter.messageId !== undefined))
          io.out(cliMessages.sentRowsMayBeDeleted());
      } else {
        const header = [
          'id',
          component === 'outbox' ? 'message id' : 'idempotency key',
          component === 'outbox' ? 'destination' : 'source',
          component === 'outbox' ? 'key' : 'aggregate',
          'state',
          'attempts',
          component === 'outbox' ? 'created (UTC)' : 'received (UTC)',
          component === 'outbox' ? 'sent (UTC)' : 'processed (UTC)',
          'last error',
        ];
        const rows = result.rows.map((r) => [
          r.id,
          oneLine(r.messageId ?? r.idempotencyKey, 36),
          r.name,
          oneLine(r.key, 30),
          r.state,
          String(r.attempts),
          formatTime(r.createdAt),
          formatTime(r.finishedAt),
          r.lastError === null ? '' : oneLine(r.lastError, 50),
        ]);
        for (const line of formatTable(header, rows, [0, 5])) io.out(line);
      }
      if (result.scannedUpTo !== null && result.next !== null) io.out(cliMessages.messagesScanned(result.scannedUpTo, result.next));
      else if (result.next !== null) io.out(cliMessages.messagesMore(result.next));
      return 0;
    });
  },
};
