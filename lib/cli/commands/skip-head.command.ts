import { parseComponent, parseRowId, parseText } from '../admin-options';
import { withAdmin } from '../admin-session';
import { CliFailure, CliUsageError } from '../cli.errors';
import { cliMessages } from '../cli.messages';
import { CONNECTION_OPTIONS_HELP, type Command, connectionOptions } from '../command';

export const skipHeadCommand: Command = {
  name: 'skip-head',
  summary: 'Dead-letter the failing head row of a key, so the rows behind it flow',
  help: `Usage: queuebox skip-head --component outbox --key <key> [--head-id <id>] [--reason <text>] [options]
       queuebox skip-head --component inbox --name <source> --key <aggregate> [...]

Moves the head row (the earliest unfinished row) of one key to dead, with last error "skipped by
admin: <reason>", so the rows queued behind it are delivered again. Only a pending head, or a
processing one whose lease has expired, is skipped: a row a worker holds is left alone. It can be
replayed later with \`queuebox dead-letters replay --id\`. Exits with 1 when nothing was skipped.

Options:
  --component <outbox|inbox>  Required
  --key <key>                 Outbox key, or inbox aggregate id (required)
  --name <source>             The inbox source (required for inbox; outbox keys span destinations)
  --head-id <id>              Skip only this row, and only while it is still the head (from
                              \`queuebox blocked\`): a safe guard when the head may have moved on
  --reason <text>             Recorded in the row's last error (default "queuebox skip-head")
  --json                      Print {skippedId} (null when nothing was skipped)
${CONNECTION_OPTIONS_HELP}
  -h, --help                  Show this help

Example:
  queuebox blocked --component outbox
  queuebox skip-head --component outbox --key order-17 --head-id 4211 --reason "bad payload, ticket OPS-12"`,
  options: {
    ...connectionOptions,
    component: { type: 'string' },
    key: { type: 'string' },
    name: { type: 'string' },
    'head-id': { type: 'string' },
    reason: { type: 'string' },
    json: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  },
  async run(values, io) {
    const component = parseComponent(values);
    const key = parseText('--key', values.key as string | undefined);
    if (key === undefined)
      throw new CliUsageError(cliMessages.optionRequired('--key', `(the ${component === 'outbox' ? 'key' : 'aggregate id'})`));
    const name = parseText('--name', values.name as string | undefined);
    if (component === 'inbox' && name === undefined)
      throw new CliUsageError(cliMessages.optionRequired('--name', 'for inbox (the source)'));
    if (component === 'outbox' && name !== undefined)
      throw new CliUsageError(cliMessages.optionNotHere('--name', 'inbox (outbox keys span destinations)'));
    const headId = values['head-id'] === undefined ? undefined : parseRowId('--head-id', values['head-id'] as string);
    const reason = parseText('--reason', values.reason as string | undefined) ?? 'queuebox skip-head';
    return withAdmin(values, io, async ({ admin, target }) => {
      const skippedId =
        component === 'outbox'
          ? await admin.skipHead({ component, key, headId, reason })
          : await admin.skipHead({ component, source: name as string, aggregateId: key, headId, reason });
      const what =
        component === 'outbox' ? `key ${JSON.stringify(key)}` : `aggregate ${JSON.stringify(key)} of source ${JSON.stringify(name)}`;
      if (values.json === true) io.out(JSON.stringify({ component, skippedId }));
      else io.out(`Database: ${target.masked} (${target.type})`);
      if (skippedId === null) throw new CliFailure(cliMessages.nothingSkipped(what, headId));
      if (values.json !== true) io.out(`Skipped row ${skippedId}, the head of ${what}: it is dead now, and the rows behind it flow again.`);
      return 0;
    });
  },
};
