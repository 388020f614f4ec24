import type { InstanceState } from '../../dialects/dialect-rows';
import { parseComponent, parseLimit } from '../admin-options';
import { withAdmin } from '../admin-session';
import { cliMessages } from '../cli.messages';
import { CONNECTION_OPTIONS_HELP, type Command, connectionOptions } from '../command';
import { formatSeconds, formatTable, formatTime, oneLine, ownerText } from '../table';

export const blockedCommand: Command = {
  name: 'blocked',
  summary: 'List keys held back by a failing head row, or by a claim (with its owner: alive, silent or dead)',
  help: `Usage: queuebox blocked --component outbox|inbox [--limit <n>] [--json] [options]

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
  --component <outbox|inbox>  Required
  --limit <n>                 At most this many keys, 1 to 1000 (default 50), oldest head first
  --json                      Print the rows as a JSON array
${CONNECTION_OPTIONS_HELP}
  -h, --help                  Show this help

Example:
  queuebox blocked --component outbox`,
  options: {
    ...connectionOptions,
    component: { type: 'string' },
    limit: { type: 'string' },
    json: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  },
  async run(values, io) {
    const component = parseComponent(values);
    const limit = parseLimit(values);
    return withAdmin(values, io, async ({ admin, target }) => {
      const rows = await admin.listBlockedKeys({ component, limit });
      if (values.json === true) {
        io.out(JSON.stringify(rows, null, 2));
        return 0;
      }
      io.out(`Database: ${target.masked} (${target.type})`);
      if (rows.length === 0) {
        io.out(`No blocked ${component} keys.`);
        return 0;
      }
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
      io.out(`Blocked ${component} keys:`);
      for (const line of formatTable(header, table, [0, 5, 7, 9])) io.out(line);
      // Only heads that are held: a pending head's last claimer holds nothing, dead or not.
      const heldBy = (state: InstanceState) => rows.filter((r) => r.owner !== null && r.ownerState === state).length;
      if (heldBy('dead') > 0) io.out(cliMessages.blockedByDeadOwners(heldBy('dead')));
      if (heldBy('silent') > 0) io.out(cliMessages.blockedBySilentOwners(heldBy('silent')));
      if (rows.length === (limit ?? 50)) io.out(`${rows.length} key(s) shown; there may be more: raise --limit.`);
      return 0;
    });
  },
};
