import { hostname, userInfo } from 'node:os';
import type { PauseRow } from '../../dialects/dialect-rows';
import type { QueueTable } from '../../types/claims';
import { parseText } from '../admin-options';
import { withAdmin } from '../admin-session';
import { CliUsageError } from '../cli.errors';
import { cliMessages } from '../cli.messages';
import { CONNECTION_OPTIONS_HELP, type Command, type CommandValues, connectionOptions } from '../command';
import { formatTable, formatTime } from '../table';

// `queuebox pause`, `queuebox resume` and `queuebox pauses` (issue 40): QueueBoxAdmin.pause,
// resume and pauses from the command line.

const TARGET_HELP = `  --destination <name>        An outbox destination
  --source <name>             An inbox source (the relay and pull handlers alike)`;

/** `--destination X` or `--source Y`, exactly one. */
function parseTarget(command: string, values: CommandValues): { component: QueueTable; name: string } {
  const destination = values.destination as string | undefined;
  const source = values.source as string | undefined;
  if (destination !== undefined && source !== undefined) throw new CliUsageError(cliMessages.pauseTargetTwice(command));
  if (destination === undefined && source === undefined) throw new CliUsageError(cliMessages.pauseTargetMissing(command));
  const [option, name] = destination !== undefined ? ['--destination', destination] : ['--source', source as string];
  if (name.length === 0 || name.length > 255) throw new CliUsageError(cliMessages.pauseNameInvalid(option));
  return { component: destination !== undefined ? 'outbox' : 'inbox', name };
}

/** `--actor`, else the operating system's user and host: who the pause names. */
function actorOf(values: CommandValues): string {
  const given = parseText('--actor', values.actor as string | undefined);
  if (given !== undefined) return given;
  let user = 'unknown';
  try {
    user = userInfo().username;
  } catch {
    // No user entry (a container's uid): the host alone.
  }
  return `cli:${user}@${hostname()}`;
}

const what = (component: QueueTable, name: string) =>
  `${component === 'outbox' ? 'destination' : 'source'} ${JSON.stringify(name)} of the ${component}`;

const targetOptions = {
  ...connectionOptions,
  destination: { type: 'string' },
  source: { type: 'string' },
  actor: { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

export const pauseCommand: Command = {
  name: 'pause',
  summary: 'Pause a destination or source: claims skip its rows, in order, until resumed',
  help: `Usage: queuebox pause --destination <name> [--reason <text>] [--actor <who>] [options]
       queuebox pause --source <name> [...]

Pauses an outbox destination or an inbox source, in the database: every replica's workers stop
claiming its rows within one poll interval (claims in flight finish). Its rows stay pending, in
order, and keep holding back the later rows of their keys; \`queuebox resume\` lets them go again.
Stored with the reason, who paused it and when; the application logs it. Pausing one that is
paused already changes nothing (the first pause is kept).

Options:
${TARGET_HELP}
  --reason <text>             Why (shown by \`queuebox pauses\`, the dashboard and health)
  --actor <who>               Who pauses (default cli:<user>@<host>)
  --json                      Print {component, name, paused} (paused: false when it was already)
${CONNECTION_OPTIONS_HELP}
  -h, --help                  Show this help

Example:
  queuebox pause --destination billing --reason "partner outage, INC-311"`,
  options: { ...targetOptions, reason: { type: 'string' } },
  async run(values, io) {
    const { component, name } = parseTarget('pause', values);
    const reason = parseText('--reason', values.reason as string | undefined);
    const actor = actorOf(values);
    return withAdmin(values, io, async ({ admin, target }) => {
      const paused = await admin.pause({ component, name, reason, actor });
      if (values.json === true) {
        io.out(JSON.stringify({ component, name, paused }));
        return 0;
      }
      io.out(`Database: ${target.masked} (${target.type})`);
      io.out(
        paused
          ? `Paused the ${what(component, name)}: workers skip its rows from their next poll; \`queuebox resume\` lets them go.`
          : `The ${what(component, name)} was paused already: nothing changed (see \`queuebox pauses\`).`,
      );
      return 0;
    });
  },
};

export const resumeCommand: Command = {
  name: 'resume',
  summary: 'Resume a paused destination or source',
  help: `Usage: queuebox resume --destination <name> [--actor <who>] [options]
       queuebox resume --source <name> [...]

Resumes a paused outbox destination or inbox source: every replica's workers claim its rows again
within one poll interval, oldest first and in order per key. Resuming one that is not paused
changes nothing.

Options:
${TARGET_HELP}
  --actor <who>               Who resumes (default cli:<user>@<host>; logged by the application)
  --json                      Print {component, name, resumed}
${CONNECTION_OPTIONS_HELP}
  -h, --help                  Show this help

Example:
  queuebox resume --destination billing`,
  options: targetOptions,
  async run(values, io) {
    const { component, name } = parseTarget('resume', values);
    const actor = actorOf(values);
    return withAdmin(values, io, async ({ admin, target }) => {
      const resumed = await admin.resume({ component, name, actor });
      if (values.json === true) {
        io.out(JSON.stringify({ component, name, resumed }));
        return 0;
      }
      io.out(`Database: ${target.masked} (${target.type})`);
      io.out(resumed ? `Resumed the ${what(component, name)}.` : `The ${what(component, name)} was not paused: nothing changed.`);
      return 0;
    });
  },
};

export const pausesCommand: Command = {
  name: 'pauses',
  summary: 'List the paused destinations and sources',
  help: `Usage: queuebox pauses [--json] [options]

Lists every paused outbox destination and inbox source: who paused it, when (UTC, by the database
clock) and why. Reads only.

Options:
  --json                      Print the rows as a JSON array
${CONNECTION_OPTIONS_HELP}
  -h, --help                  Show this help

Example:
  queuebox pauses`,
  options: { ...connectionOptions, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
  async run(values, io) {
    return withAdmin(values, io, async ({ admin, target }) => {
      const rows = await admin.pauses();
      if (values.json === true) {
        io.out(JSON.stringify(rows, null, 2));
        return 0;
      }
      io.out(`Database: ${target.masked} (${target.type})`);
      for (const line of formatPauses(rows)) io.out(line);
      return 0;
    });
  },
};

/** The pauses as `queuebox pauses` and `queuebox status` print them. */
export function formatPauses(rows: readonly PauseRow[]): string[] {
  if (rows.length === 0) return ['Nothing is paused.'];
  const table = rows.map((r) => [
    r.component === 'outbox' ? 'destination' : 'source',
    r.name,
    r.pausedBy ?? '-',
    formatTime(r.pausedAt),
    r.reason ?? '-',
  ]);
  return ['Paused:', ...formatTable(['kind', 'name', 'paused by', 'paused at (UTC)', 'reason'], table)];
}
