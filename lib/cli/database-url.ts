import type { DataSourceOptions } from 'typeorm';
import { CliUsageError } from './cli.errors';
import { cliMessages } from './cli.messages';

/** What a database URL says, as TypeORM connection options, and how to show it safely. */
export interface DatabaseTarget {
  type: 'postgres' | 'mssql';
  /** TypeORM's connection options (no migrations, no logging). */
  connection: DataSourceOptions;
  /** The URL with its password (user info, `password=` and `sslpassword=` parameters) replaced by `***`. */
  masked: string;
  /** `host:port`, for messages. */
  where: string;
  user: string;
  database: string;
  /** The passwords (user info and URL parameters) as given and decoded, so any text can be scrubbed of them. */
  secrets: string[];
}

// A connection that hangs (a firewall dropping packets) fails within this instead of minutes.
const CONNECT_TIMEOUT_MS = 10_000;

// URL parameters that carry a password (libpq and node-postgres read both).
const PASSWORD_PARAMETER = /([?&;](?:ssl)?password=)[^&;#\s]*/gi;

/**
 * Replaces the password of every `scheme://user:password@` in `text`, and the value of every
 * `password=` / `sslpassword=` URL parameter, with `***`, and then any remaining occurrence of the
 * given secrets. Every line the CLI prints goes through this.
 */
export function maskSecrets(text: string, secrets: readonly string[] = []): string {
  let masked = text.replace(/([a-z][a-z0-9+.-]*:\/\/[^\s:/@]*:)[^\s@/]*@/gi, '$1***@').replace(PASSWORD_PARAMETER, '$1***');
  for (const secret of secrets) if (secret.length > 0) masked = masked.split(secret).join('***');
  return masked;
}

/** Parses `postgres://` / `postgresql://` / `mssql://` / `sqlserver://` URLs. Throws `CliUsageError` for anything else. */
export function parseDatabaseUrl(raw: string): DatabaseTarget {
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
  if (scheme === 'postgres' || scheme === 'postgresql') {
    const where = `${url.hostname || 'localhost'}:${url.port || '5432'}`;
    return {
      type: 'postgres',
      connection: { type: 'postgres', url: raw, extra: { max: 2, connectionTimeoutMillis: CONNECT_TIMEOUT_MS } },
      masked,
      where,
      user: user || 'the default user',
      database: database || user,
      secrets,
    };
  }
  if (scheme === 'mssql' || scheme === 'sqlserver') {
    if (!url.hostname) throw new CliUsageError(cliMessages.urlNoHost(masked));
    if (!database) throw new CliUsageError(cliMessages.urlNoDatabase(masked));
    const flag = (name: string, fallback: boolean): boolean => {
      const value = url.searchParams.get(name);
      if (value === null) return fallback;
      if (value === 'true' || value === 'false') return value === 'true';
      throw new CliUsageError(cliMessages.urlBadParameter(name, value));
    };
    const instanceName = url.searchParams.get('instanceName') ?? undefined;
    return {
      type: 'mssql',
      connection: {
        type: 'mssql',
        host: url.hostname,
        port: url.port ? Number(url.port) : 1433,
        username: user,
        password,
        database,
        connectionTimeout: CONNECT_TIMEOUT_MS,
        pool: { max: 2 },
        options: { encrypt: flag('encrypt', true), trustServerCertificate: flag('trustServerCertificate', false), instanceName },
      },
      masked,
      where: `${url.hostname}:${url.port || (instanceName ? `(instance ${instanceName})` : '1433')}`,
      user,
      database,
      secrets,
    };
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

/** The target with the request timeout migrations need (SQL Server); unchanged on PostgreSQL. */
export function forMigrations(target: DatabaseTarget): DatabaseTarget {
  if (target.connection.type !== 'mssql') return target;
  return { ...target, connection: { ...target.connection, requestTimeout: MIGRATION_REQUEST_TIMEOUT_MS } };
}
