// The database clock and time arithmetic, as fragments of PostgreSQL statements.

// I7: `now()` is the start of the transaction. Every lease and fence reads `clock_timestamp()`,
// the current time, so a fence evaluated late in a long transaction sees an expired lease.
export const NOW = 'clock_timestamp()';

export const msFromNow = (param: string) => `${NOW} + make_interval(secs => ${param}::double precision / 1000)`;

export const msAgo = (param: string) => `${NOW} - make_interval(secs => ${param}::double precision / 1000)`;
