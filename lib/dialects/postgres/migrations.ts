import type { DialectDriver } from '../dialect-driver';
import {
  postgresAttemptsDown,
  postgresAttemptsUp,
  postgresClaimPlansDown,
  postgresClaimPlansUp,
  postgresClaimProbesDown,
  postgresClaimProbesUp,
  postgresClaimsDown,
  postgresClaimsUp,
  postgresInstancesDown,
  postgresInstancesUp,
  postgresKeyCollationDown,
  postgresKeyCollationUp,
  postgresKeyedClaimsDown,
  postgresKeyedClaimsUp,
  postgresOperationsDown,
  postgresOperationsUp,
  postgresPausesDown,
  postgresPausesUp,
  postgresRateLimitsDown,
  postgresRateLimitsUp,
  postgresRenewalsDown,
  postgresRenewalsUp,
  postgresSchemaDown,
  postgresSchemaUp,
  postgresUnkeyedClaimsDown,
  postgresUnkeyedClaimsUp,
} from './schema';

/**
 * PostgreSQL's statements of each QueueBox migration, the one list that the migrations, the SQL
 * scripts and the doctor's expected indexes read (a migration added here reaches all three).
 */
export const postgresMigrations: DialectDriver['migrations'] = {
  schema: { up: postgresSchemaUp, down: postgresSchemaDown },
  operations: { up: postgresOperationsUp, down: postgresOperationsDown },
  claims: { up: postgresClaimsUp, down: postgresClaimsDown },
  keyCollation: { up: postgresKeyCollationUp, down: postgresKeyCollationDown },
  claimFunctions: { up: () => [], down: () => [] },
  instances: { up: postgresInstancesUp, down: postgresInstancesDown },
  claimProbes: { up: postgresClaimProbesUp, down: postgresClaimProbesDown },
  rateLimits: { up: postgresRateLimitsUp, down: postgresRateLimitsDown },
  renewals: { up: postgresRenewalsUp, down: postgresRenewalsDown },
  pauses: { up: postgresPausesUp, down: postgresPausesDown },
  attempts: { up: postgresAttemptsUp, down: postgresAttemptsDown },
  unkeyedClaims: { up: postgresUnkeyedClaimsUp, down: postgresUnkeyedClaimsDown },
  keyedClaims: { up: postgresKeyedClaimsUp, down: postgresKeyedClaimsDown },
  claimPlans: { up: postgresClaimPlansUp, down: postgresClaimPlansDown },
};
