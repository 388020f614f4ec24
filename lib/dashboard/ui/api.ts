// The dashboard's JSON API, relative to the page (`<path>/`), so any mount path and global prefix work.

export interface Session {
  token: string;
  tokenHeader: string;
  readOnly: boolean;
  actor: string;
  instances: { name: string; heartbeats: boolean }[];
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string | undefined,
    message: string,
  ) {
    super(message);
  }
}

type Params = Record<string, string | number | undefined | null>;

function url(path: string, params?: Params): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params ?? {})) {
    if (value !== undefined && value !== null && value !== '') search.set(name, String(value));
  }
  const query = search.toString();
  return `api/${path}${query ? `?${query}` : ''}`;
}

async function answer<T>(response: Response): Promise<T> {
  const body = (await response.json().catch(() => null)) as { message?: string | string[]; error?: string } | null;
  if (!response.ok) {
    const message = Array.isArray(body?.message) ? body.message.join(' ') : (body?.message ?? `HTTP ${response.status}`);
    throw new ApiError(response.status, body?.error, message);
  }
  return body as T;
}

export async function get<T>(path: string, params?: Params): Promise<T> {
  return answer<T>(await fetch(url(path, params), { headers: { accept: 'application/json' }, credentials: 'same-origin' }));
}

export async function post<T>(session: Session, path: string, body: unknown): Promise<T> {
  return answer<T>(
    await fetch(url(path), {
      method: 'POST',
      credentials: 'same-origin',
      headers: { accept: 'application/json', 'content-type': 'application/json', [session.tokenHeader]: session.token },
      body: JSON.stringify(body),
    }),
  );
}

export const session = () => get<Session>('session');
