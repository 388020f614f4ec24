import type { DataSourceOptions } from 'typeorm';
import { type DialectType, dialectDriver, dialectDriverForScheme, type UrlProblems } from '../dialects/drivers';
import { CliUsageError } from './cli.errors';
import { cliMessages } from './cli.messages';

/** What a database URL says, as TypeORM connection options, and how to show it safely. */
export interface DatabaseTarget {
  type: DialectType;
  /** TypeORM's connection options (no migrations, no logging). */
  connection: DataSourceOptions;
  /** The URL with its password (user info, `password=` and `sslpassword=` parameters) replaced by `***`. */
  masked: string;
  /** `host:port`, for messages. */
  where: string;
  user: string;
  database: string;
  /** The passwords (user info and URL parameters) as given and decoded, so a URL of this one can be masked whatever its password holds. */
  secrets: string[];
}

// A connection that hangs (a firewall dropping packets) fails within this instead of minutes.
const CONNECT_TIMEOUT_MS = 10_000;

// The CLI runs one command at a time: two connections are plenty.
const POOL_MAX = 2;

// URL parameters that carry a password (libpq and node-postgres read both).
const PASSWORD_PARAMETER = /([?&;](?:ssl)?password=)[^&;#\s]*/gi;

// The password of `scheme://user:password@`. A match can only start at `://` after a scheme
// character, and each run stops at a character its class leaves out (the user at `:`, the
// password at `@`), so no character is read more than a few times: linear in the text. The
// earlier pattern began with the scheme (`[a-z][a-z0-9+.-]*://`), which retried from every letter
// of a long run: quadratic, 62 s for `queuebox status` on a 100 kB argument (issue 34).
const USER_INFO_PASSWORD = /(?<=[a-z0-9+.-]):\/\/([^\s:/@]*):[^\s@/]*@/gi;

/**
 * Replaces the password of every `scheme://user:password@` in `text`, and the value of every
 * `password=` / `sslpassword=` URL parameter, with `***`. Only there: the same characters elsewhere
 * are not a password (the embedded test server's password is "postgres", as is the `type` of every
 * JSON report). The given `secrets` (the command's URLs' passwords) are masked where they stand
 * between `:` and `@` first, so a password with an `@` the URL left unencoded, where the pattern
 * stops, is masked whole. Every line the CLI prints goes through this, in time linear in its length.
 */
export function maskSecrets(text: string, secrets: readonly string[] = []): string {
  let masked = text;
  for (const secret of secrets) if (secret.length > 0) masked = masked.split(`:${secret}@`).join(':***@');
  return masked.replace(USER_INFO_PASSWORD, '://$1:***@').replace(PASSWORD_PARAMETER, '$1***');
}

/**
 * Parses URLs of the dialect drivers' schemes (`postgres://`, `postgresql://`, `mssql://`, `sqlserver://`).
 * Throws `CliUsageError` for anything else. The pool holds `poolMax` connections (default 2: one
 * command at a time; `queuebox verify` sizes its workers' pools).
 */
export function parseDatabaseUrl(raw: string, options: { poolMax?: number } = {}): DatabaseTarget {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new CliUsageError(cliMessages.urlUnparseable());
  }
  const scheme = url.protocol.slice(0, -1).toLowerCase();
  const user = decodeURIComponent(url.username);
  const password = decodeURIComponent(url.password);
  const parameters = [...raw.matchAll(PASSWORD_PARAMETER)].map((match) => match[0].slice(match[1].length));
  const decoded = parameters.map((value) => {
    try {
      return decodeURIComponent(value.replace(/\+/g, ' '));
    } catch {
      return value;
    }
  });
  const secrets = [...new Set([password, url.password, ...parameters, ...decoded])].filter((s) => s.length > 0);
  const masked = maskSecrets(raw, secrets);
  const database = decodeURIComponent(url.pathname.replace(/^\//, ''));
  const driver = dialectDriverForScheme(scheme);
  if (driver) {
    const fail: UrlProblems = {
      noHost: () => {
        throw new CliUsageError(cliMessages.urlNoHost(masked));
      },
      noDatabase: () => {
        throw new CliUsageError(cliMessages.urlNoDatabase(masked));
      },
      badParameter: (name, value) => {
        throw new CliUsageError(cliMessages.urlBadParameter(name, value));
      },
    };
    const found = driver.connectionFromUrl({
      url,
      raw,
      user,
      password,
      database,
      connectTimeoutMs: CONNECT_TIMEOUT_MS,
      poolMax: options.poolMax ?? POOL_MAX,
      fail,
    });
    return { type: driver.type, ...found, masked, secrets };
  }
  throw new CliUsageError(cliMessages.urlSchemeUnknown(scheme));
}

/**
 * SQL Server's request timeout for `queuebox migrate`: one hour. Migrations build and rebuild
 * indexes (004 rebuilds every index on a key column), which on a large table takes far longer than
 * mssql's default of 15 s; a migration cut off by the client fails half-way through. PostgreSQL
 * has no client-side statement timeout here.
 */
export const MIGRATION_REQUEST_TIMEOUT_MS = 3_600_000;

/** The target with the request timeout migrations need (SQL Server); unchanged where the driver has none (PostgreSQL). */
export function forMigrations(target: DatabaseTarget): DatabaseTarget {
  const connection = dialectDriver(target.type).withRequestTimeout(target.connection, MIGRATION_REQUEST_TIMEOUT_MS);
  return connection === target.connection ? target : { ...target, connection };
}
