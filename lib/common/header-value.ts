/**
 * The wire form of the header values QueueBox writes from user data: `X-QueueBox-Key` (the outbox
 * key) and `X-Causation-Id` (the inbox idempotency key the relay forwards). A key is ordinary data
 * (`клиент-1`, `订单-7`, `a b`), but an HTTP header value is Latin-1 bytes without CR, LF or NUL,
 * and its surrounding spaces are dropped. So:
 *
 * - a value of visible ASCII (`!` to `~`, spaces only inside) goes as it is;
 * - any other value goes in RFC 8187's extended form, `UTF-8''` followed by its UTF-8 bytes
 *   percent-encoded except RFC 8187's attr-chars (`UTF-8''%D0%BA%D0%BB%D0%B8%D0%B5%D0%BD%D1%82-1`);
 * - so does a plain value that already reads as that form (`utf-8'en'x`), so decoding is exact.
 *
 * `decodeHeaderValue(encodeHeaderValue(v)) === v` for every string the database can store.
 */

/** Visible ASCII, with spaces inside only (fetch and Node drop surrounding ones). */
const PLAIN = /^[!-~](?:[ -~]*[!-~])?$/;
/** RFC 8187 ext-value with charset UTF-8: `UTF-8'<language>'<value-chars>` (case-insensitive charset). */
const EXTENDED = /^UTF-8'([A-Za-z0-9-]*)'((?:%[0-9A-Fa-f]{2}|[A-Za-z0-9!#$&+\-.^_`|~])*)$/i;
/** RFC 8187 attr-char: what goes unencoded in the extended form. */
const ATTR_CHAR = /[A-Za-z0-9!#$&+\-.^_`|~]/;

// fatal: bytes that are not UTF-8 are an error, not U+FFFD; ignoreBOM: a leading U+FEFF is part of the value.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * `value` as QueueBox sends it in a header: unchanged when it is visible ASCII, else
 * `UTF-8''<percent-encoded UTF-8>` (RFC 8187).
 *
 * @example
 * encodeHeaderValue('order-7') // 'order-7'
 * encodeHeaderValue('订单-7') // "UTF-8''%E8%AE%A2%E5%8D%95-7"
 */
export function encodeHeaderValue(value: string): string {
  if (PLAIN.test(value) && !EXTENDED.test(value)) return value;
  let encoded = "UTF-8''";
  for (const byte of Buffer.from(value, 'utf8')) {
    const char = String.fromCharCode(byte);
    encoded += byte < 0x80 && ATTR_CHAR.test(char) ? char : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return encoded;
}

/**
 * The value a header sent by `encodeHeaderValue` stands for: an RFC 8187 `UTF-8'…'…` value
 * decoded, anything else unchanged. `undefined` when it has the extended form but its bytes are
 * not UTF-8.
 *
 * @example
 * decodeHeaderValue(request.headers['x-queuebox-key']) // '订单-7' for "UTF-8''%E8%AE%A2%E5%8D%95-7"
 */
export function decodeHeaderValue(value: string): string | undefined {
  const extended = EXTENDED.exec(value);
  if (!extended) return value;
  const text = extended[2];
  const bytes: number[] = [];
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '%') {
      bytes.push(Number.parseInt(text.slice(i + 1, i + 3), 16));
      i += 2;
    } else bytes.push(text.charCodeAt(i));
  }
  try {
    return utf8.decode(Uint8Array.from(bytes));
  } catch {
    return undefined;
  }
}
