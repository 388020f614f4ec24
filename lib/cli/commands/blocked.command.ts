import type { BlockedKeyRow, InstanceState } from '../../dialects/dialect-rows';
import type { QueueTable } from '../../types/claims';
import { parseComponent, parseLimit } from '../admin-options';
import { withAdmin } from '../admin-session';
import { cliMessages } from '../cli.messages';
import { CONNECTION_OPTIONS_HELP, type Command, connectionOptions } from '../command';
import { formatSeconds, formatTable, formatTime, oneLine, ownerText } from '../table';

export const blockedCommand: Command = {
  name: 'blocked',
  summary: 'List keys held back by a failing head row, or by a claim (with its owner: alive, silent or dead)',
  help: `Usage: queuebox blocked [--component outbox|inbox] [--limit <n>] [--json] [options]

Lists the keys (outbox "key") and aggregates (inbox source and aggregate id) whose head row, the
earliest unfinished row of the key, holds back the rows behind it: "failing", it failed at least
once and is not finished, or "held", a worker claimed it and rows of its key wait. For each: the
head row's id (for \`queuebox skip-head --head-id\`), destination or source, key, why, state,
attempts, its next attempt (or lease end), and, while a worker holds it (processing, its lease
not expired), for how long and by which instance (see \`queuebox instances\`) in which state:
alive, SILENT (missed two heartbeats) or DEAD. A head nobody holds (pending until its retry, or
its lease expired) has no owner: "none; last claimed by <id>" names the instance of its last
attempt. Then how many rows wait, and its last error. A held head whose owner is dead moves again
once a live replica ends the dead one's leases (instances.deadAfterMs, 15 s by default). Reads only.

Options:
  --component <outbox|inbox>  One component; default both, outbox first
  --limit <n>                 At most this many keys per component, 1 to 1000 (default 50),
                              oldest head first
  --json                      Print the rows as a JSON array (each row names its component)
${CONNECTION_OPTIONS_HELP}
  -h, --help                  Show this help

Examples:
  queuebox blocked
  queuebox blocked --component outbox`,
  options: {
    ...connectionOptions,
    component: { type: 'string' },
    limit: { type: 'string' },
    json: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  },
  async run(values, io) {
    // No --component: both, so a first look misses no blocked key (issue 40).
    const components: QueueTable[] = values.component === undefined ? ['outbox', 'inbox'] : [parseComponent(values)];
    const limit = parseLimit(values);
    return withAdmin(values, io, async ({ admin, target }) => {
      const found: BlockedKeyRow[][] = [];
      for (const component of components) found.push(await admin.listBlockedKeys({ component, limit }));
      if (values.json === true) {
        io.out(JSON.stringify(found.flat(), null, 2));
        return 0;
      }
      io.out(`Database: ${target.masked} (${target.type})`);
      components.forEach((component, i) => {
        for (const line of blockedLines(component, found[i], limit)) io.out(line);
      });
      return 0;
    });
  },
};

/** One component's blocked keys as a table, with the notes on dead or silent owners. */
function blockedLines(component: QueueTable, rows: BlockedKeyRow[], limit: number | undefined): string[] {
  if (rows.length === 0) return [`No blocked ${component} keys.`];
  const header = [
    'head id',
    component === 'outbox' ? 'destination' : 'source',
    component === 'outbox' ? 'key' : 'aggregate',
    'why',
    'state',
    'attempts',
    'next attempt',
    'held for',
    'owner',
    'waiting',
    'last error',
  ];
  const table = rows.map((r) => [
    r.headId,
    r.name,
    oneLine(r.key, 30),
    r.reason,
    r.state,
    String(r.attempts),
    formatTime(r.nextAttemptAt),
    r.heldSeconds === null ? '' : formatSeconds(r.heldSeconds),
    ownerText(r),
    String(r.waiting),
    r.lastError === null ? '' : oneLine(r.lastError, 60),
  ]);
  const lines = [`Blocked ${component} keys:`, ...formatTable(header, table, [0, 5, 7, 9])];
  // Only heads that are held: a pending head's last claimer holds nothing, dead or not.
  const heldBy = (state: InstanceState) => rows.filter((r) => r.owner !== null && r.ownerState === state).length;
  if (heldBy('dead') > 0) lines.push(cliMessages.blockedByDeadOwners(heldBy('dead')));
  if (heldBy('silent') > 0) lines.push(cliMessages.blockedBySilentOwners(heldBy('silent')));
  if (rows.length === (limit ?? 50)) lines.push(`${rows.length} ${component} key(s) shown; there may be more: raise --limit.`);
  return lines;
}
