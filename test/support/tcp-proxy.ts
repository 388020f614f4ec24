import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy to PostgreSQL that a test can fault: `cut()` closes every connection and stops
 * listening (the database "goes away"); `pause()` keeps every socket open but forwards nothing, in
 * either direction, and holds new connections the same way (a silent partition: no error, no
 * answer); `resume()` forwards again.
 */
export class TcpProxy {
  private server?: Server;
  private readonly sockets = new Set<Socket>();
  private paused = false;
  port = 0;

  constructor(private readonly target: { host: string; port: number }) {}

  async open(): Promise<void> {
    this.server = createServer((client) => {
      const upstream = connect(this.target);
      for (const socket of [client, upstream]) {
        this.sockets.add(socket);
        socket.on('close', () => this.sockets.delete(socket));
        socket.on('error', () => socket.destroy());
      }
      client.pipe(upstream).pipe(client);
      // After pipe(), which sets both flowing: a connection made during a pause is held too.
      if (this.paused) for (const socket of [client, upstream]) socket.pause();
    });
    await new Promise<void>((resolve) => this.server?.listen(this.port, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
  }

  /** A URL like `url` that goes through this proxy. */
  route(url: string): string {
    const routed = new URL(url);
    routed.host = `127.0.0.1:${this.port}`;
    return routed.toString();
  }

  pause(): void {
    this.paused = true;
    for (const socket of this.sockets) socket.pause();
  }

  resume(): void {
    this.paused = false;
    for (const socket of this.sockets) socket.resume();
  }

  async cut(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise((resolve) => this.server?.close(resolve));
  }
}
