import type { InstanceRow, PauseRow } from '../dialects/dialect-rows';
import type { DoctorReport } from '../health/database-doctor';
import type { QueueTable } from '../types/claims';
import { dashboardMessages as messages } from './dashboard.messages';
import type { DashboardAdmin, ResolvedDashboardOptions } from './dashboard.options';

/**
 * One line of the overview's status board: something an operator should look at. `level`:
 * `warning` (look soon) or `critical` (act now). `view`: the dashboard view that shows more
 * (`heartbeats`, `dead?component=inbox`), relative to the instance.
 */
export interface OverviewFlag {
  /** Stable and unique within one answer: what raised it and about what (`lag:outbox:billing`). */
  id: string;
  level: 'warning' | 'critical';
  text: string;
  view?: string;
}

/** What a flag source reads: the instance's admin, its backlog as the overview shows it, its pauses, the doctor's warnings and the dashboard's options. */
export interface FlagContext {
  instance: string;
  admin: DashboardAdmin;
  backlog: readonly { component: QueueTable; name: string; oldestPendingAgeSeconds: number | null; paused?: boolean }[];
  /** The paused destinations and sources; `null` for an admin without `pauses()`. */
  pauses?: readonly PauseRow[] | null;
  options: ResolvedDashboardOptions;
  /** The doctor's last examination of the instance's database (docs/doctor.md); absent for an admin made outside the app's QueueBoxes. */
  warnings?: () => Promise<DoctorReport>;
}

/** Makes the flags of one kind; a source that throws is shown as a flag saying it could not check (the others still show). */
export type FlagSource = { name: string; flags(context: FlagContext): Promise<OverviewFlag[]> | OverviewFlag[] };

/**
 * Lag: a destination or source whose oldest due pending row waits longer than `lagThresholdSeconds`.
 * Critical past 5 times that. A paused one is left out: its rows wait on purpose (it has its own flag).
 */
export const lagFlags: FlagSource = {
  name: 'lag',
  flags: ({ backlog, options }) =>
    backlog
      .filter((b) => !b.paused && b.oldestPendingAgeSeconds !== null && b.oldestPendingAgeSeconds > options.lagThresholdSeconds)
      .map((b) => ({
        id: `lag:${b.component}:${b.name}`,
        level: (b.oldestPendingAgeSeconds as number) > 5 * options.lagThresholdSeconds ? 'critical' : 'warning',
        text: messages.flagLag(b.component, b.name, b.oldestPendingAgeSeconds as number, options.lagThresholdSeconds),
      })),
};

/** Instances that missed heartbeats: `silent` (warning) and `dead` (critical: its rows wait for a live replica). */
export const instanceFlags: FlagSource = {
  name: 'instances',
  async flags({ admin }) {
    if (typeof admin.instances !== 'function') return [];
    const rows: InstanceRow[] = await admin.instances();
    return rows
      .filter((r) => r.state !== 'alive')
      .map((r) => ({
        id: `instance:${r.id}`,
        level: r.state === 'dead' ? 'critical' : 'warning',
        text: messages.flagInstance(r.state, r.id, r.host, r.pid, r.heartbeatAgeSeconds, r.claims.outbox + r.claims.inbox),
        view: 'heartbeats',
      }));
  },
};

/** Paused destinations and sources (docs/operations.md, Pause and resume): a warning each, with who paused it, when and why. */
export const pauseFlags: FlagSource = {
  name: 'pauses',
  flags: ({ pauses }) =>
    (pauses ?? []).map((p) => ({
      id: `paused:${p.component}:${p.name}`,
      level: 'warning' as const,
      text: messages.flagPaused(p.component, p.name, p.pausedBy, p.pausedAt, p.reason),
    })),
};

/** Database warnings: one flag while the doctor reports any of severity error (critical) or warning, linking to the Database view. */
export const databaseFlags: FlagSource = {
  name: 'database',
  async flags({ warnings }) {
    if (!warnings) return [];
    const shown = (await warnings()).warnings.filter((w) => w.severity !== 'info');
    if (shown.length === 0) return [];
    const errors = shown.filter((w) => w.severity === 'error').length;
    const codes = [...new Set(shown.map((w) => w.code))];
    return [
      {
        id: 'database',
        level: errors > 0 ? 'critical' : 'warning',
        text: messages.flagDatabase(errors, shown.length - errors, codes),
        view: 'warnings',
      },
    ];
  },
};

/**
 * The overview's flag sources, in the order their flags show. Another kind of flag (paused
 * destinations) is one more `FlagSource` in this list.
 */
export const FLAG_SOURCES: readonly FlagSource[] = [lagFlags, instanceFlags, pauseFlags, databaseFlags];

/** Every source's flags, critical first; a source that fails says so in a flag of its own. */
export async function collectFlags(context: FlagContext, sources: readonly FlagSource[] = FLAG_SOURCES): Promise<OverviewFlag[]> {
  const found = await Promise.all(
    sources.map(async (source) => {
      try {
        return await source.flags(context);
      } catch (error) {
        return [
          {
            id: `unavailable:${source.name}`,
            level: 'warning' as const,
            text: messages.flagUnavailable(source.name, (error as Error).message),
          },
        ];
      }
    }),
  );
  const all = found.flat();
  return [...all.filter((f) => f.level === 'critical'), ...all.filter((f) => f.level !== 'critical')];
}
