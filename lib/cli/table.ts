/** Rows as aligned columns, two spaces apart, each line indented by two; `right` columns are right-aligned. */
export function formatTable(header: readonly string[], rows: readonly string[][], right: readonly number[] = []): string[] {
  const widths = header.map((title, i) => Math.max(title.length, ...rows.map((row) => row[i].length)));
  const format = (row: readonly string[]) =>
    `  ${row.map((cell, i) => (right.includes(i) ? cell.padStart(widths[i]) : i === row.length - 1 ? cell : cell.padEnd(widths[i]))).join('  ')}`;
  return [format(header), ...rows.map(format)];
}

/** One line of at most `max` characters: whitespace runs (newlines included) collapsed, `…` when cut. */
export function oneLine(text: string | null, max: number): string {
  if (text === null) return '-';
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length <= max ? flat : `${flat.slice(0, max - 1)}…`;
}

/**
 * One line of at most `max` characters that keeps both ends when cut: an error's first words say
 * which attempt and publisher, its last ones the cause the driver or server gave.
 */
export function oneLineBothEnds(text: string | null, max: number): string {
  if (text === null) return '-';
  const flat = text.replace(/\s+/g, ' ').trim();
  if (flat.length <= max) return flat;
  const head = Math.ceil((max - 3) / 2);
  return `${flat.slice(0, head)} … ${flat.slice(flat.length - (max - 3 - head))}`;
}

/** An instant as ISO 8601 UTC to the second: `2026-11-30T14:03:07Z`. */
export function formatTime(time: Date | null): string {
  return time === null ? '-' : `${time.toISOString().slice(0, 19)}Z`;
}

/** Seconds as `4.2s`, `3m 05s`, `2h 07m`: how long something has been held or silent. */
export function formatSeconds(seconds: number): string {
  if (seconds < 60) return `${seconds.toFixed(1)}s`;
  const s = Math.floor(seconds);
  const two = (n: number) => String(n).padStart(2, '0');
  if (s < 3600) return `${Math.floor(s / 60)}m ${two(s % 60)}s`;
  return `${Math.floor(s / 3600)}h ${two(Math.floor((s % 3600) / 60))}m`;
}

/** The instance holding a claim, shortened, and whether it is alive: `3f2a9c1e (alive)`, `3f2a9c1e (DEAD)`, `-`. */
export function ownerText(owner: string | null, alive: boolean | null): string {
  if (owner === null) return '-';
  return `${owner.slice(0, 8)} (${alive ? 'alive' : 'DEAD'})`;
}
