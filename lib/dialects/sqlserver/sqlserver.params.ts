import { MssqlParameter } from 'typeorm';

/**
 * mssql's `MAX` (65535). tedious declares an NVARCHAR parameter of any length above 4,000 as
 * NVARCHAR(MAX); without a length it declares NVARCHAR(<this value's length>), and each distinct
 * length compiles and caches a plan of its own.
 */
export const NVARCHAR_MAX = 65_535;

/** The length of the key columns (destination, key, source, idempotency_key, aggregate_id). */
export const KEY_LENGTH = 255;

// Parameters are typed to match their columns exactly (NVARCHAR text of the column's length,
// BIGINT ids, UNIQUEIDENTIFIER tokens), so no comparison converts a column, and one statement
// keeps one cached plan whatever the lengths of its values.
export const text = (value: string | null, length: number = NVARCHAR_MAX) => new MssqlParameter(value, 'nvarchar', length);
export const name = (value: string | null) => text(value, KEY_LENGTH);
export const bigint = (value: string | number) => new MssqlParameter(value, 'bigint');
export const int = (value: number) => new MssqlParameter(value, 'int');
export const float = (value: number) => new MssqlParameter(value, 'float');
export const guid = (value: string) => new MssqlParameter(value, 'uniqueidentifier');
export const guidOrNull = (value: string | null) => new MssqlParameter(value, 'uniqueidentifier');
export const bigintOrNull = (value: string | null) => new MssqlParameter(value, 'bigint');
/** An instant as ISO-8601 UTC text (`...Z`, 24 characters), never in the Node process's time zone (see utcInstant). */
export const instant = (value: Date | null) => text(value === null ? null : value.toISOString(), 30);
