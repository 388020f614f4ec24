// The Node.js floor: `engines.node` in package.json says which lines QueueBox is tested on. npm only
// warns on install (one warning among many), and everything then runs: QueueBox says it once more,
// at start-up, and runs anyway (no refusal: an application that works on an older line keeps working).

type Version = [number, number, number];

function parse(text: string): Version | undefined {
  const match = /^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?/.exec(text.trim());
  return match ? [Number(match[1]), Number(match[2] ?? 0), Number(match[3] ?? 0)] : undefined;
}

function compare(a: Version, b: Version): number {
  return a[0] - b[0] || a[1] - b[1] || a[2] - b[2];
}

/**
 * Whether `running` (`process.version`, e.g. `v20.11.1`) is in `range`, in the forms `engines`
 * uses: `^X.Y.Z`, `>=X.Y.Z`, `X.Y.Z`, joined by `||`. A range in another form answers true: this
 * check only ever warns, and a warning it cannot justify would be noise.
 */
export function nodeVersionSupported(running: string, range: string): boolean {
  const version = parse(running);
  if (!version) return true;
  return range.split('||').some((part) => {
    const comparator = part.trim();
    const caret = /^\^(.+)$/.exec(comparator);
    const atLeast = /^>=\s*(.+)$/.exec(comparator);
    const bound = parse(caret?.[1] ?? atLeast?.[1] ?? comparator);
    if (!bound || !/^[\^>=v\d]/.test(comparator)) return true;
    if (caret) return version[0] === bound[0] && compare(version, bound) >= 0;
    if (atLeast) return compare(version, bound) >= 0;
    return compare(version, bound) === 0;
  });
}
