import { withAdmin } from '../admin-session';
import { CONNECTION_OPTIONS_HELP, type Command, connectionOptions } from '../command';
import { formatSeconds, formatTable, formatTime, instanceStateText } from '../table';

export const instancesCommand: Command = {
  name: 'instances',
  summary: 'List the QueueBox instances (processes) with their heartbeats and claims',
  help: `Usage: queuebox instances [--json] [options]

Lists every QueueBox instance registered in the instances table (one per process and DataSource):
its id (claims name it as their owner; see \`queuebox blocked\`), host, pid, DataSource, version,
when it started, how long ago it last heartbeat (by the database clock), its state and how many
outbox and inbox rows it holds now. The state, by the database clock, with D its
instances.deadAfterMs: alive (last heartbeat at most 2/3 D ago), SILENT (older: it missed at
least two heartbeats, and still holds its rows) or DEAD (older than D: a live replica ends its
leases at its next heartbeat, and it leaves this list). Reads only.

Options:
  --json                      Print the rows as a JSON array
${CONNECTION_OPTIONS_HELP}
  -h, --help                  Show this help

Example:
  queuebox instances`,
  options: { ...connectionOptions, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
  async run(values, io) {
    return withAdmin(values, io, async ({ admin, target }) => {
      const rows = await admin.instances();
      if (values.json === true) {
        io.out(JSON.stringify(rows, null, 2));
        return 0;
      }
      io.out(`Database: ${target.masked} (${target.type})`);
      if (rows.length === 0) {
        io.out('No QueueBox instance is registered (none runs, or none has started since migration 006).');
        return 0;
      }
      const header = ['id', 'host', 'pid', 'data source', 'version', 'started', 'last heartbeat', 'state', 'outbox claims', 'inbox claims'];
      const table = rows.map((r) => [
        r.id,
        r.host,
        String(r.pid),
        r.dataSource,
        r.version,
        formatTime(r.startedAt),
        `${formatSeconds(r.heartbeatAgeSeconds)} ago`,
        instanceStateText(r),
        String(r.claims.outbox),
        String(r.claims.inbox),
      ]);
      io.out('QueueBox instances:');
      for (const line of formatTable(header, table, [2, 8, 9])) io.out(line);
      return 0;
    });
  },
};
