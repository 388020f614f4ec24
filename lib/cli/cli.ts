import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { describeError } from '../common/errors';
import { QueueBoxAdminError, QueueBoxValidationError } from '../errors/queuebox.errors';
import { CliFailure, CliUsageError } from './cli.errors';
import { cliMessages } from './cli.messages';
import type { CliIo, Command, CommandValues } from './command';
import { attemptsCommand } from './commands/attempts.command';
import { blockedCommand } from './commands/blocked.command';
import { deadLettersCommand } from './commands/dead-letters.command';
import { doctorCommand } from './commands/doctor.command';
import { instancesCommand } from './commands/instances.command';
import { messagesCommand } from './commands/messages.command';
import { migrateCommand } from './commands/migrate.command';
import { pauseCommand, pausesCommand, resumeCommand } from './commands/pauses.command';
import { skipHeadCommand } from './commands/skip-head.command';
import { sqlCommand } from './commands/sql.command';
import { statusCommand } from './commands/status.command';
import { verifyCommand } from './commands/verify.command';
import { maskSecrets, parseDatabaseUrl } from './database-url';

/** Exit codes, as documented in docs/cli.md. */
export const EXIT = { ok: 0, failure: 1, usage: 2 } as const;

/** The commands, in help order. The row commands (dead-letters, ...) go through QueueBoxAdmin. */
export const commands: readonly Command[] = [
  migrateCommand,
  statusCommand,
  sqlCommand,
  messagesCommand,
  deadLettersCommand,
  attemptsCommand,
  blockedCommand,
  skipHeadCommand,
  pauseCommand,
  resumeCommand,
  pausesCommand,
  instancesCommand,
  doctorCommand,
  verifyCommand,
];

const HELP = `Usage: queuebox <command> [options]

Run it from your project, where queuebox is installed: \`npx --no-install queuebox <command>\`
(or ./node_modules/.bin/queuebox, or an npm script). A plain \`npx queuebox\` outside such a
folder downloads whatever package of that name the registry has: it is not this CLI.

Commands:
${commands.map((command) => `  ${command.name.padEnd(12)} ${command.summary}`).join('\n')}

Options:
  -h, --help      Show this help; \`queuebox <command> --help\` shows a command's
  -v, --version   Print the version

Database URL (every command but sql): --url, else $QUEUEBOX_DATABASE_URL, else $DATABASE_URL.
  postgres://user:password@host:5432/database     also postgresql://; node-postgres reads
                                                  parameters such as ?sslmode=require
  mssql://user:password@host:1433/database        also sqlserver://; parameters:
      ?encrypt=true|false                 (default true)
      &trustServerCertificate=true|false  (default false; true for a self-signed certificate)
      &instanceName=NAME                  (a named instance, instead of the port)
  Percent-encode special characters in the user or password (@ is %40, : is %3A).
  JDBC and ADO.NET strings (sqlserver://host;databaseName=...) are not accepted.
  Passwords are never printed: every URL shown reads user:***@host.

Exit codes: 0 success; 1 failure (cannot connect or log in, missing database or schema, SQL
error, skip-head skipped nothing, a verify check failed, doctor found an error-level warning); 2 usage error (unknown command or option,
missing or malformed URL, bad --tables or --component, an unfiltered replay or discard without
--all): nothing was done; 130 verify interrupted by Ctrl-C (its tables dropped).`;

/** The package's version, from the package.json above this file (dist/cli or .build/lib/cli). */
function version(): string {
  for (let dir = __dirname; dir !== dirname(dir); dir = dirname(dir)) {
    const file = join(dir, 'package.json');
    if (!existsSync(file)) continue;
    const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; version?: string };
    if (pkg.name === 'queuebox') return pkg.version ?? 'unknown';
  }
  return 'unknown';
}

/** The passwords of every URL the command may have seen, so each is masked whole where a URL shows it (`maskSecrets`). */
function secretsOf(args: readonly string[], env: NodeJS.ProcessEnv): string[] {
  const candidates = [...args, env.QUEUEBOX_DATABASE_URL, env.DATABASE_URL].filter((value): value is string => typeof value === 'string');
  const secrets: string[] = [];
  for (const candidate of candidates) {
    try {
      secrets.push(...parseDatabaseUrl(candidate).secrets);
    } catch {
      // Not a database URL.
    }
  }
  return secrets;
}

/**
 * Runs `queuebox <args>` and resolves to the exit code. Everything printed passes through
 * `maskSecrets`: no URL password reaches the terminal, whatever the driver says.
 */
export async function runCli(args: readonly string[], io: CliIo): Promise<number> {
  const secrets = secretsOf(args, io.env);
  const safe: CliIo = {
    env: io.env,
    out: (text) => io.out(maskSecrets(text, secrets)),
    err: (text) => io.err(maskSecrets(text, secrets)),
  };
  const [first, ...rest] = args;
  if (first === '-h' || first === '--help' || first === 'help') {
    const command = commands.find((c) => c.name === rest[0]);
    io.out(command ? command.help : HELP); // static text: its user:password placeholders are not secrets
    return EXIT.ok;
  }
  if (first === '-v' || first === '--version') {
    safe.out(version());
    return EXIT.ok;
  }
  if (first === undefined) {
    io.err(HELP);
    safe.err(`\nqueuebox: ${cliMessages.commandMissing()}`);
    return EXIT.usage;
  }
  const command = commands.find((c) => c.name === first);
  if (!command) {
    safe.err(`queuebox: ${cliMessages.commandUnknown(first)}`);
    return EXIT.usage;
  }
  try {
    let values: CommandValues;
    let positionals: string[];
    try {
      const parsed = parseArgs({ args: [...rest], options: command.options, strict: true, allowPositionals: command.positionals === true });
      values = parsed.values as CommandValues;
      positionals = parsed.positionals;
    } catch (error) {
      throw new CliUsageError(cliMessages.optionInvalid(command.name, error instanceof Error ? error.message : String(error)));
    }
    if (values.help === true) {
      io.out(command.help);
      return EXIT.ok;
    }
    return await command.run(values, safe, positionals);
  } catch (error) {
    // QueueBoxAdmin (and the SQL Server dialect, for key lengths) validates its arguments before
    // any statement: a bad one is a usage error.
    if (error instanceof CliUsageError || error instanceof QueueBoxAdminError || error instanceof QueueBoxValidationError) {
      safe.err(`queuebox ${command.name}: ${error.message}`);
      return EXIT.usage;
    }
    const message = error instanceof CliFailure ? error.message : cliMessages.commandFailed(describeError(error).split('\n')[0]);
    safe.err(`queuebox ${command.name}: ${message}`);
    return EXIT.failure;
  }
}
