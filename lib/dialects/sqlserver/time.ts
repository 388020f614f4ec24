// The database clock and time arithmetic, as fragments of SQL Server statements.

// I7: SYSUTCDATETIME() is evaluated when the statement runs, never at the transaction's start, so
// a fence evaluated late in a long transaction sees an expired lease. UTC, because the columns
// are DATETIME2 without an offset (GETDATE() would store the server's local time).
export const NOW = 'SYSUTCDATETIME()';

/** `now + ms` for a BIGINT parameter: seconds and milliseconds apart, as DATEADD takes an INT (24 days of milliseconds). */
export const msFromNow = (param: string) =>
  `DATEADD(MILLISECOND, CAST(${param} % 1000 AS INT), DATEADD(SECOND, CAST(${param} / 1000 AS INT), ${NOW}))`;

/** DATETIME2 carries no offset and TypeORM reads it as local time; returned as DATETIMEOFFSET, it is read as the UTC instant it is. */
export const asUtc = (column: string) => `TODATETIMEOFFSET(${column}, '+00:00')`;

/** `now - ms` for a BIGINT parameter (seconds and milliseconds apart, as DATEADD takes an INT). */
export const msAgo = (param: string) =>
  `DATEADD(MILLISECOND, -CAST(${param} % 1000 AS INT), DATEADD(SECOND, -CAST(${param} / 1000 AS INT), ${NOW}))`;

/**
 * An instant sent as ISO-8601 UTC text (`2030-01-02T03:04:05.678Z`), as the UTC DATETIME2 the
 * columns hold. A Date parameter would be sent by the driver in the Node process's time zone
 * (TypeORM's mssql driver sets `useUTC: false`), shifting every filter by the zone's offset.
 */
export const utcInstant = (param: string) => `CAST(SWITCHOFFSET(CAST(${param} AS DATETIMEOFFSET), '+00:00') AS DATETIME2)`;
