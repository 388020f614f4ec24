// Elements are built with createElement and text nodes only: no innerHTML, so nothing a row holds
// (payloads, errors, keys) is ever parsed as markup.

export type Child = Node | string | number | null | undefined | false | Child[];
type Attributes = Record<string, string | number | boolean | EventListener | null | undefined>;

function append(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(parent, child);
    else parent.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function apply(element: Element, attributes: Attributes | null | undefined): void {
  for (const [name, value] of Object.entries(attributes ?? {})) {
    if (value === null || value === undefined || value === false) continue;
    if (typeof value === 'function') element.addEventListener(name.slice(2).toLowerCase(), value);
    else element.setAttribute(name, value === true ? '' : String(value));
  }
}

/** An HTML element with attributes (`onClick`: a listener; `true`: a boolean attribute) and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attributes?: Attributes | null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  apply(element, attributes);
  append(element, children);
  return element;
}

/** An SVG element, for the charts. */
export function s(tag: string, attributes?: Attributes | null, ...children: Child[]): SVGElement {
  const element = document.createElementNS('http://www.w3.org/2000/svg', tag);
  apply(element, attributes);
  append(element, children);
  return element;
}

/** Replaces the children of `parent`. */
export function mount(parent: Element, ...children: Child[]): void {
  parent.replaceChildren();
  append(parent, children);
}

/** A time as UTC, to the second: `2026-12-02 14:05:33Z`. */
export function time(value: string | null | undefined): string {
  if (!value) return '—';
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? value : `${date.toISOString().slice(0, 19).replace('T', ' ')}Z`;
}

/** A duration in seconds, short: `42 s`, `3 min 5 s`, `2 h 10 min`. */
export function duration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined) return '—';
  const negative = seconds < 0;
  let left = Math.round(Math.abs(seconds));
  const parts: string[] = [];
  for (const [unit, size] of [
    ['d', 86_400],
    ['h', 3_600],
    ['min', 60],
  ] as const) {
    if (left >= size) {
      parts.push(`${Math.floor(left / size)} ${unit}`);
      left %= size;
    }
    if (parts.length === 2) break;
  }
  if (parts.length < 2 && (left > 0 || parts.length === 0)) parts.push(`${left} s`);
  return `${negative ? '−' : ''}${parts.join(' ')}`;
}

export const plural = (n: number, one: string, many = `${one}s`) => `${n.toLocaleString('en')} ${n === 1 ? one : many}`;
