import { writeFileSync } from 'node:fs';
import { QueueBoxConfigError } from '../../errors/queuebox.errors';
import { CliFailure, CliUsageError } from '../cli.errors';
import { cliMessages } from '../cli.messages';
import type { Command } from '../command';
import { maskSecrets, parseDatabaseUrl } from '../database-url';
import { verifyMessages } from '../verify/verify.messages';
import {
  resolveVerifyOptions,
  VERIFY_BOUNDS,
  VERIFY_SCENARIOS,
  type VerifyIntegerOption,
  type VerifyOptions,
  type VerifyScenario,
} from '../verify/verify.options';
import { reportLines } from '../verify/verify.report';
import { runVerify, VerifyInterruptedError, VerifyTablesInUseError } from '../verify/verify.runner';

/** Exit code of a run interrupted by Ctrl-C (128 + SIGINT), once its workers are stopped and its tables dropped. */
export const EXIT_INTERRUPTED = 130;

/** The integer options: their CLI names. */
const INTEGER_OPTIONS: Record<VerifyIntegerOption, string> = {
  seconds: 'seconds',
  rate: 'rate',
  workers: 'workers',
  pool: 'pool',
  leaseMs: 'lease-ms',
  heartbeatMs: 'heartbeat-ms',
  deadAfterMs: 'dead-after-ms',
  maxAttempts: 'max-attempts',
  keys: 'keys',
  slowPercent: 'slow',
  drainSeconds: 'drain-seconds',
};

const bound = (name: VerifyIntegerOption) => `${VERIFY_BOUNDS[name].fallback}; ${VERIFY_BOUNDS[name].min} to ${VERIFY_BOUNDS[name].max}`;

export const verifyCommand: Command = {
  name: 'verify',
  summary: 'Prove the delivery guarantees on your database: worker processes under kill -9, pauses, lost sessions, admin pauses',
  help: `Usage: queuebox verify [--url <url>] [--seconds N] [--scenarios kill,pause,...] [--json <file>] [options]

Runs QueueBox on your database as an application would, under faults, and checks what a
destination received. It creates tables of its own (<prefix>_outbox, _inbox, _instances and
_migrations), starts worker processes of this package (outbox poller, relay, pull handlers),
writes messages for --seconds at --rate (rows of one key committed out of order, poison
messages), injects the faults of --scenarios, waits for every row to finish, checks, prints one
line per check (PASS, FAIL or SKIP with its figure) and drops its tables. Use a database or
schema you can spare: it needs to create and drop tables there. See docs/verify.md.

Checks: lost (every message delivered), duplicates (each redelivery explained by a fault;
nothing handled or forwarded twice), order (first deliveries of one key in commit order), stuck
(no row pending or processing after the drain), poison (dead after --max-attempts, never
delivered), recovery (after kill -9, the killed worker's keys move again in time), shutdown
(a graceful shutdown ends in time and leaves nothing held), paused (nothing of a destination or
source paused through the admin is claimed until its resume).

Options:
  --url <url>                 Database URL; default $QUEUEBOX_DATABASE_URL, then $DATABASE_URL
  --seconds <n>               How long the producers write (default ${bound('seconds')})
  --rate <n>                  Messages per second, over the four paths (default ${bound('rate')})
  --scenarios <list>          Comma-separated: ${VERIFY_SCENARIOS.join(', ')} (default all), or none
  --json <file>               Also write the report as JSON, with every failure's messages
  --workers <n>               Worker processes (default ${bound('workers')})
  --pool <n>                  Each worker's connection pool (default ${bound('pool')})
  --lease-ms <n>              Every claim's lease (default ${bound('leaseMs')})
  --heartbeat-ms <n>          instances.heartbeatMs (default ${bound('heartbeatMs')})
  --dead-after-ms <n>         instances.deadAfterMs (default ${bound('deadAfterMs')})
  --max-attempts <n>          Attempts before a message is dead (default ${bound('maxAttempts')})
  --keys <n>                  Keys per path (default ${bound('keys')})
  --slow <percent>            Slow messages: publish, relay route and batch take half a lease (at most
                              2 s), the pull handler 1.2 leases, kept by renewals (a lease up to 10 s)
                              (default ${bound('slowPercent')})
  --drain-seconds <n>         How long to wait after production for every row to finish (default:
                              20 s + 4 leases + dead-after-ms + half of --seconds)
  --prefix <name>             Table prefix (default queuebox_verify)
  --schema <name>             An existing schema for the tables (default: the login's default schema)
  --force                     Drop the tables first even if they hold rows (a killed run left them)
  -h, --help                  Show this help

Exit codes: 0 every check passed; 1 a check failed, or the run could not start (connection,
tables in use); 2 usage error; 130 interrupted (Ctrl-C): the workers were stopped and the tables
dropped first. Ctrl-C a second time quits at once and leaves the tables (run again with --force).

Example:
  queuebox verify --url postgres://app@db:5432/scratch --seconds 60 --json verify.json`,
  options: {
    url: { type: 'string' },
    seconds: { type: 'string' },
    rate: { type: 'string' },
    scenarios: { type: 'string' },
    json: { type: 'string' },
    workers: { type: 'string' },
    pool: { type: 'string' },
    'lease-ms': { type: 'string' },
    'heartbeat-ms': { type: 'string' },
    'dead-after-ms': { type: 'string' },
    'max-attempts': { type: 'string' },
    keys: { type: 'string' },
    slow: { type: 'string' },
    'drain-seconds': { type: 'string' },
    prefix: { type: 'string' },
    schema: { type: 'string' },
    force: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  },
  async run(values, io) {
    const url = (values.url as string | undefined) ?? io.env.QUEUEBOX_DATABASE_URL ?? io.env.DATABASE_URL;
    if (url === undefined || url === '') throw new CliUsageError(cliMessages.urlMissing());
    const secrets = parseDatabaseUrl(url).secrets;
    const options: VerifyOptions = {
      url,
      scenarios: parseScenarios(values.scenarios as string | undefined),
      prefix: values.prefix as string | undefined,
      schema: values.schema as string | undefined,
      force: values.force === true,
      log: (line) => io.out(line),
    };
    for (const [name, flag] of Object.entries(INTEGER_OPTIONS) as [VerifyIntegerOption, string][]) {
      const value = values[flag] as string | undefined;
      if (value === undefined) continue;
      if (!/^[0-9]+$/.test(value)) throw new CliUsageError(cliMessages.verifyIntegerInvalid(flag, value));
      options[name] = Number(value);
    }
    const json = values.json as string | undefined;
    try {
      resolveVerifyOptions(options);
    } catch (error) {
      if (!(error instanceof QueueBoxConfigError)) throw error;
      const flag = INTEGER_OPTIONS[error.option as VerifyIntegerOption] ?? (error.option in values ? error.option : undefined);
      throw new CliUsageError(flag === undefined ? error.message : `--${flag}: ${error.message}`);
    }

    // Ctrl-C stops the run the way it ends: workers stopped, tables dropped. A second one quits at once.
    const interrupt = new AbortController();
    const onInterrupt = () => {
      if (interrupt.signal.aborted) process.exit(EXIT_INTERRUPTED);
      io.err(`queuebox verify: ${cliMessages.verifyInterrupting()}`);
      interrupt.abort();
    };
    process.on('SIGINT', onInterrupt);
    try {
      const report = await runVerify({ ...options, signal: interrupt.signal });
      for (const line of reportLines(report, json)) io.out(line);
      if (json !== undefined) {
        writeFileSync(json, `${maskSecrets(JSON.stringify(report, null, 2), secrets)}\n`);
        io.out(cliMessages.verifyJsonWritten(json));
      }
      return report.verdict === 'PASS' ? 0 : 1;
    } catch (error) {
      if (error instanceof VerifyInterruptedError) {
        io.err(`queuebox verify: ${verifyMessages.interrupted(error.tablesDropped)}`);
        return EXIT_INTERRUPTED;
      }
      if (error instanceof VerifyTablesInUseError) throw new CliFailure(error.message);
      throw error;
    } finally {
      process.removeListener('SIGINT', onInterrupt);
    }
  },
};

/** `--scenarios kill,pause` (or `none`): the list, each checked. */
function parseScenarios(value: string | undefined): VerifyScenario[] | undefined {
  if (value === undefined) return undefined;
  if (value.trim() === 'none') return [];
  const scenarios = value.split(',').map((part) => part.trim());
  for (const scenario of scenarios) {
    if (!VERIFY_SCENARIOS.includes(scenario as VerifyScenario)) {
      throw new CliUsageError(cliMessages.verifyScenarioInvalid(scenario, VERIFY_SCENARIOS));
    }
  }
  return scenarios as VerifyScenario[];
}
