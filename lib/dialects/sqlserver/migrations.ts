import type { DialectDriver } from '../dialect-driver';
import {
  sqlServerAttemptsDown,
  sqlServerAttemptsUp,
  sqlServerClaimsDown,
  sqlServerClaimsUp,
  sqlServerInstancesDown,
  sqlServerInstancesUp,
  sqlServerKeyCollationDown,
  sqlServerKeyCollationUp,
  sqlServerOperationsDown,
  sqlServerOperationsUp,
  sqlServerPausesDown,
  sqlServerPausesUp,
  sqlServerRateLimitsDown,
  sqlServerRateLimitsUp,
  sqlServerRenewalsDown,
  sqlServerRenewalsUp,
  sqlServerSchemaDown,
  sqlServerSchemaUp,
} from './schema';

/**
 * SQL Server's statements of each QueueBox migration, the one list that the migrations, the SQL
 * scripts and the doctor's expected indexes read (a migration added here reaches all three).
 */
export const sqlServerMigrations: DialectDriver['migrations'] = {
  schema: { up: sqlServerSchemaUp, down: sqlServerSchemaDown },
  operations: { up: sqlServerOperationsUp, down: sqlServerOperationsDown },
  claims: { up: sqlServerClaimsUp, down: sqlServerClaimsDown },
  keyCollation: { up: sqlServerKeyCollationUp, down: sqlServerKeyCollationDown },
  claimFunctions: { up: () => [], down: () => [] },
  instances: { up: sqlServerInstancesUp, down: sqlServerInstancesDown },
  claimProbes: { up: () => [], down: () => [] },
  rateLimits: { up: sqlServerRateLimitsUp, down: sqlServerRateLimitsDown },
  renewals: { up: sqlServerRenewalsUp, down: sqlServerRenewalsDown },
  pauses: { up: sqlServerPausesUp, down: sqlServerPausesDown },
  attempts: { up: sqlServerAttemptsUp, down: sqlServerAttemptsDown },
  unkeyedClaims: { up: () => [], down: () => [] },
  keyedClaims: { up: () => [], down: () => [] },
  claimPlans: { up: () => [], down: () => [] },
};
